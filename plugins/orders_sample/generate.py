"""Deterministic order events for one day, as JSON lines in a date-partitioned landing folder.

    <landing>/date=2026-11-20/part-00000.jsonl ...

One line is one order: {"order_id", "customer_id", "amount", "currency", "ordered_at"}.
The same (day, lines, bad_share, customers) always gives the same bytes. A share of the
lines is bad on purpose, one of BAD_KINDS each, so the pipeline's validation is exercised.
The folder appears at once (written aside, then renamed), so a job never reads half of it.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

BAD_KINDS = ("truncated_json", "missing_customer", "negative_amount", "amount_not_a_number",
             "other_day", "bad_timestamp")


@dataclass(frozen=True)
class Generated:
    folder: Path
    lines: int
    bad_lines: int
    files: int


def day_folder(landing: Path, day: date) -> Path:
    return Path(landing) / f"date={day.isoformat()}"


def generate(landing: Path, day: date, lines: int, bad_share: float = 0.01, customers: int | None = None,
             files: int = 4) -> Generated:
    if lines < 0:
        raise ValueError(f"lines must be 0 or more, not {lines}")
    if not 0 <= bad_share <= 1:
        raise ValueError(f"bad_share must be between 0 and 1, not {bad_share}")
    customers = customers or max(10, lines // 20)
    rng = random.Random(f"orders {day} {lines} {bad_share} {customers}")
    folder = day_folder(landing, day)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    files = max(1, min(files, lines or 1))
    start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    bad = 0
    outs = [open(partial / f"part-{i:05d}.jsonl", "w", encoding="utf-8") for i in range(files)]
    try:
        for i in range(lines):
            order = {
                "order_id": f"{day:%Y%m%d}-{i:09d}",
                "customer_id": f"c{rng.randrange(customers):07d}",
                "amount": round(rng.uniform(1, 500), 2),
                "currency": "EUR",
                "ordered_at": _iso(start + timedelta(milliseconds=rng.randrange(86_400_000))),
            }
            if rng.random() < bad_share:
                line = _spoil(order, BAD_KINDS[rng.randrange(len(BAD_KINDS))], start)
                bad += 1
            else:
                line = json.dumps(order, separators=(",", ":"))
            outs[i % files].write(line + "\n")
    finally:
        for out in outs:
            out.close()
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return Generated(folder, lines, bad, files)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _spoil(order: dict, kind: str, start: datetime) -> str:
    if kind == "truncated_json":
        text = json.dumps(order, separators=(",", ":"))
        return text[: len(text) // 2]
    if kind == "missing_customer":
        del order["customer_id"]
    elif kind == "negative_amount":
        order["amount"] = -order["amount"]
    elif kind == "amount_not_a_number":
        order["amount"] = f"{order['amount']:.2f}".replace(".", ",")
    elif kind == "other_day":
        order["ordered_at"] = _iso(start - timedelta(hours=3))
    elif kind == "bad_timestamp":
        order["ordered_at"] = "yesterday evening"
    return json.dumps(order, separators=(",", ":"))
