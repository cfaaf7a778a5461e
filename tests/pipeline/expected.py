"""The example pipeline's result, computed independently of Spark: plain Python over
the sample files, following the validation rules documented in docs/example.md."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

_CUSTOMER = re.compile(r"^c[0-9]{1,12}$")


@dataclass
class Totals:
    orders: int
    revenue: Decimal
    first: datetime
    last: datetime


def _valid(line: str, day: date):
    try:
        order = json.loads(line, parse_float=Decimal)
    except ValueError:
        return None
    if not isinstance(order, dict):
        return None
    order_id, customer, amount, at = (order.get(k) for k in ("order_id", "customer_id", "amount", "ordered_at"))
    if not isinstance(order_id, str) or not order_id or not isinstance(customer, str) or not _CUSTOMER.match(customer):
        return None
    if isinstance(amount, bool) or not isinstance(amount, (int, Decimal)) or amount < 0:
        return None
    try:
        moment = datetime.fromisoformat(at.replace("Z", "+00:00")).astimezone(timezone.utc)
    except (AttributeError, ValueError):
        return None
    if moment.date() != day:
        return None
    return customer, Decimal(amount).quantize(Decimal("0.01"), ROUND_HALF_UP), moment


def expected_totals(folder: Path, day: date) -> tuple[dict[str, Totals], int, int]:
    """({customer: Totals}, input lines, rejected lines) of one day's landing folder."""
    totals: dict[str, Totals] = {}
    lines = rejected = 0
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            lines += 1
            valid = _valid(line, day)
            if valid is None:
                rejected += 1
                continue
            customer, amount, moment = valid
            t = totals.get(customer)
            if t is None:
                totals[customer] = Totals(1, amount, moment, moment)
            else:
                t.orders, t.revenue = t.orders + 1, t.revenue + amount
                t.first, t.last = min(t.first, moment), max(t.last, moment)
    return totals, lines, rejected
