"""The hostile-input catalog: landing files no well-behaved producer writes, each with
what the example pipeline must make of every line in it.

One Case is one or more files of a day's landing folder. `expect` gives, per line in file
order (lines split as Spark's text source splits them: at \\n, \\r\\n and \\r), the
line's outcome:

- "valid": loaded as an order (its customer's expected row is in `rows`);
- "blank": counted as a blank line;
- "duplicate": a copy of an order already delivered with the same contents, loaded once;
- a key of order_rules.REASONS: rejected for that reason (kept in the rejects).

Each valid line belongs to its own customer (c8<case number>), so the test can check the
table row by row. Files under `skipped` are not read and must be reported.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal


@dataclass
class Case:
    name: str
    files: dict[str, bytes]
    expect: list[str]
    rows: dict[str, tuple[int, Decimal]] = field(default_factory=dict)  # customer -> (orders, revenue)
    skipped: list[str] = field(default_factory=list)  # paths relative to the day folder, not read


def split_lines(data: bytes) -> list[bytes]:
    """Lines as Spark's text source (Hadoop's LineReader) finds them."""
    parts = re.split(rb"\r\n|\r|\n", data)
    return parts[:-1] if parts and parts[-1] == b"" else parts


def file_lines(name: str, data: bytes) -> list[bytes]:
    return split_lines(gzip.decompress(data) if name.endswith(".gz") else data)


def catalog(day: date) -> list[Case]:
    d = day.isoformat()
    t = f"{d}T08:15:00Z"
    cases: list[Case] = []

    def line(n: int, **fields) -> bytes:
        order = {"order_id": f"h{n}", "customer_id": f"c8{n:05d}", "amount": 12.5, "ordered_at": t}
        order.update(fields)
        return json.dumps(order, separators=(",", ":")).encode()

    def add(name: str, content: bytes, expect: list[str], rows=None, **more) -> None:
        n = len(cases)
        cases.append(Case(name, {f"case-{n:02d}-{name}.jsonl": content}, expect, rows or {}, **more))

    def n() -> int:
        return len(cases)

    def one(name: str, expect: str, revenue: str = "12.50", **fields) -> None:
        k = n()
        rows = {f"c8{k:05d}": (1, Decimal(revenue))} if expect == "valid" else {}
        add(name, line(k, **fields) + b"\n", [expect], rows)

    # -- JSON shapes ----------------------------------------------------------------------
    one("valid_order", "valid")
    add("two_objects_on_a_line", line(n()) + line(n()) + b"\n", ["not_json"])
    add("trailing_garbage", line(n()) + b" trailing garbage }{\n", ["not_json"])
    add("top_level_array", b"[" + line(n()) + b"]\n", ["not_object"])
    add("top_level_string", b'"an order"\n', ["not_object"])
    add("repeated_field", line(n())[:-1] + b',"amount":99}\n', ["repeated_field"])
    add("nested_too_deeply", b"[" * 100_000 + b"]" * 100_000 + b"\n", ["not_json"])
    add("line_over_1_mib", line(n(), note="x" * (1 << 20)) + b"\n", ["too_long"])
    add("nan_literal", line(n()).replace(b"12.5", b"NaN") + b"\n", ["not_json"])
    add("infinity_literal", line(n()).replace(b"12.5", b"Infinity") + b"\n", ["not_json"])
    add("nul_byte_outside_strings", line(n())[:-1] + b"\x00}\n", ["not_json"])
    one("unknown_and_nested_fields_ignored", "valid", currency="EUR", meta={"a": [1, {"b": None}], "amount": -1})
    add("null_fields", line(n(), customer_id=None) + b"\n", ["bad_customer"])
    # -- encodings ------------------------------------------------------------------------
    add("invalid_utf8", line(n())[:-1] + b',"note":"caf\xe9"}\n', ["not_utf8"])
    add("overlong_utf8", line(n())[:-1] + b',"note":"\xc0\xaf"}\n', ["not_utf8"])
    add("utf16_with_bom", b"\xff\xfe" + line(n()).decode().encode("utf-16-le") + b"\n", ["not_utf8"])
    k = n()
    add("utf8_byte_order_mark", b"\xef\xbb\xbf" + line(k) + b"\n", ["valid"], {f"c8{k:05d}": (1, Decimal("12.50"))})
    # -- ids ------------------------------------------------------------------------------
    for name, value in [("customer_newline", "c0000001\n"), ("customer_crlf", "c0000001\r\n"),
                        ("customer_nel", "c0000001\u0085"), ("customer_line_separator", "c0000001\u2028"),
                        ("customer_fullwidth_digits", "c\uff10\uff11"), ("customer_arabic_digits", "c\u0661\u0662"),
                        ("customer_13_digits", "c1234567890123"), ("customer_uppercase", "C0000001")]:
        one(name, "bad_customer", customer_id=value)
    one("customer_number", "bad_customer", customer_id=1234)
    one("order_id_missing", "bad_order_id", order_id=None)
    one("order_id_number", "bad_order_id", order_id=42)
    one("order_id_whitespace", "bad_order_id", order_id="  ")
    one("order_id_padded", "bad_order_id", order_id=" h1 ")
    one("order_id_nul", "bad_order_id", order_id="h\u0000")
    one("order_id_too_long", "bad_order_id", order_id="h" * 201)
    add("order_id_lone_surrogate", line(n()).replace(b'"h', b'"\\ud800', 1) + b"\n", ["bad_order_id"])
    # -- numbers --------------------------------------------------------------------------
    add("amount_above_column", line(n()).replace(b"12.5", b"100000000000.5") + b"\n", ["amount_too_large"])
    add("amount_1e400", line(n()).replace(b"12.5", b"1e400") + b"\n", ["amount_too_large"])
    add("amount_rounds_over_max", line(n()).replace(b"12.5", b"9999999999.995") + b"\n", ["amount_too_large"])
    k = n()
    add("amount_max", line(k).replace(b"12.5", b"9999999999.99") + b"\n", ["valid"],
        {f"c8{k:05d}": (1, Decimal("9999999999.99"))})
    one("amount_nan_string", "bad_amount", amount="NaN")
    one("amount_numeric_string", "bad_amount", amount="12.50")
    one("amount_boolean", "bad_amount", amount=True)
    one("amount_missing", "bad_amount", amount=None)
    one("amount_negative", "negative_amount", amount=-3)
    one("amount_tiny_negative", "negative_amount", amount=-0.001)
    one("amount_negative_zero", "valid", revenue="0.00", amount=-0.0)
    k = n()
    add("amount_many_digits", line(k).replace(b"12.5", b"12.345000000000000000000000000001") + b"\n", ["valid"],
        {f"c8{k:05d}": (1, Decimal("12.35"))})
    # -- timestamps -----------------------------------------------------------------------
    epoch_ms = int(datetime(day.year, day.month, day.day, 8, tzinfo=timezone.utc).timestamp() * 1000)
    one("time_epoch_millis", "bad_time", ordered_at=epoch_ms)
    one("time_epoch_seconds", "bad_time", ordered_at=epoch_ms // 1000)
    one("time_without_offset", "bad_time", ordered_at=f"{d}T08:15:00")
    one("time_date_only", "bad_time", ordered_at=d)
    one("time_leap_second", "bad_time", ordered_at=f"{d}T23:59:60Z")
    one("time_hour_25", "bad_time", ordered_at=f"{d}T25:00:00Z")
    one("time_words", "bad_time", ordered_at="yesterday evening")
    one("time_nanoseconds", "valid", ordered_at=f"{d}T08:15:00.123456789Z")
    one("time_lowercase_t_and_z", "valid", ordered_at=f"{d}t08:15:00z")
    one("time_offset_into_the_day", "valid", ordered_at=f"{(day + timedelta(days=1)).isoformat()}T01:00:00+02:00")
    one("time_offset_out_of_the_day", "other_day", ordered_at=f"{d}T01:00:00+02:00")
    # -- line terminators and blanks ------------------------------------------------------
    k = n()
    add("crlf_cr_and_no_final_newline", line(k) + b"\r\n" + line(k, order_id=f"h{k}b") + b"\r"
        + line(k, order_id=f"h{k}c"), ["valid"] * 3, {f"c8{k:05d}": (3, Decimal("37.50"))})
    add("blank_and_whitespace_lines", b"\n   \t\n\n", ["blank"] * 3)
    add("empty_file", b"", [])
    # -- duplicate deliveries -------------------------------------------------------------
    k = n()
    same = line(k)
    cases.append(Case("same_order_in_two_files", {f"case-{k:02d}-a.jsonl": same + b"\n" + same + b"\n",
                                                  f"case-{k:02d}-b.jsonl": same + b"\n"},
                      ["valid", "duplicate", "duplicate"], {f"c8{k:05d}": (1, Decimal("12.50"))}))
    k = n()
    add("same_order_written_differently", line(k) + b"\n" + line(k, amount=12.50001, ordered_at=t.replace(
        "Z", "+00:00")) + b"\n", ["valid", "duplicate"], {f"c8{k:05d}": (1, Decimal("12.50"))})
    add("same_order_id_other_amount", line(n()) + b"\n" + line(n(), amount=99) + b"\n",
        ["conflicting_order", "conflicting_order"])
    # -- file system ----------------------------------------------------------------------
    k = n()
    cases.append(Case("gzip_file", {f"case-{k:02d}-gzip.jsonl.gz": gzip.compress(line(k) + b"\n", mtime=0)},
                      ["valid"], {f"c8{k:05d}": (1, Decimal("12.50"))}))
    k = n()
    cases.append(Case("hidden_and_nested_files", {
        f"_case-{k:02d}.jsonl": line(k) + b"\n", f".case-{k:02d}.jsonl": line(k) + b"\n",
        f"case-{k:02d}-part.jsonl/x.jsonl": line(k) + b"\n", "_SUCCESS": b""}, [],
        skipped=[f"_case-{k:02d}.jsonl", f".case-{k:02d}.jsonl", f"case-{k:02d}-part.jsonl/x.jsonl"]))
    return cases


def write(folder, cases: list[Case]) -> None:
    """The cases' files into the day folder (created)."""
    for case in cases:
        for name, data in case.files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
