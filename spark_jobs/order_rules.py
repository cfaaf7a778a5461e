"""The example pipeline's validation rules: is one input line a valid order of the day?

Pure Python, no Spark: the job runs `check_line` on its executors (pickled by value, so
they need nothing installed) and the unit tests call it directly. docs/example.md states
the same rules for people.

Every line gets exactly one verdict: blank, a valid Order, or a rejection with a reason
key (counted per key in the load's metrics, the texts are REASONS) and a detail that
names what is wrong with this line's value.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import NamedTuple

MAX_LINE_BYTES = 1 << 20          # an order is ~150 bytes; a longer line is not parsed
MAX_ORDER_ID_CHARS = 200
CENT = Decimal("0.01")
MAX_AMOUNT = Decimal("9999999999.99")  # what the job's decimal(12, 2) amounts hold
BOM = b"\xef\xbb\xbf"

REASONS = {
    "not_utf8": "not valid UTF-8",
    "too_long": f"line longer than {MAX_LINE_BYTES:,} bytes",
    "not_json": "not JSON",
    "not_object": "not a JSON object",
    "repeated_field": "order_id, customer_id, amount or ordered_at appears twice in the object",
    "bad_order_id": "order_id missing or not a usable string",
    "bad_customer": "customer_id missing or not like c0001234",
    "bad_amount": "amount missing or not a JSON number",
    "negative_amount": "amount is negative",
    "amount_too_large": f"amount above {MAX_AMOUNT:,}",
    "bad_time": "ordered_at missing or not an ISO-8601 timestamp with a UTC offset",
    "other_day": "ordered_at is not on the load's day (UTC)",
    "conflicting_order": "order_id repeated with a different customer, amount or time",
}

_CUSTOMER = re.compile(r"c[0-9]{1,12}")
# Control characters (C0, DEL, C1), line and paragraph separators, unpaired surrogates.
_ODD_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
FIELDS = ("order_id", "customer_id", "amount", "ordered_at")
# RFC 3339 / ISO-8601 with a mandatory offset: 2026-11-20T08:58:10.739Z, ...+01:00
_TIMESTAMP = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                        r"(?:\.([0-9]{1,9}))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))")
_DATE_ONLY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_NO_OFFSET = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?")


class Order(NamedTuple):
    order_id: str
    customer_id: str
    amount: Decimal      # rounded half up to cents
    ordered_at: datetime  # UTC


class Verdict(NamedTuple):
    """One line's outcome: `order` when valid, else `reason` (a REASONS key) and `detail`;
    neither for a blank line."""

    order: Order | None = None
    reason: str | None = None
    detail: str | None = None

    @property
    def blank(self) -> bool:
        return self.order is None and self.reason is None


BLANK = Verdict()


class _Rejected(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class _Object(dict):
    """A JSON object that remembers which of its keys appeared more than once."""

    repeated: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, object]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.repeated = tuple(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


class _Decoder:
    """A json.JSONDecoder made once per process, that pickles as its settings (the job
    ships these rules to executors by value, and a decoder's C scanner cannot be pickled)."""

    def __init__(self, **settings):
        self.settings, self._decoder = settings, None

    def __getstate__(self):
        return {"settings": self.settings, "_decoder": None}

    def decode(self, text: str):
        if self._decoder is None:
            self._decoder = json.JSONDecoder(**self.settings)
        return self._decoder.decode(text)


# Numbers as Decimal: exact, so 1e400 is a number too large, not infinity, and 12.345 stays
# what was written. One decoder for all lines (json.loads builds one per call).
_DECODER = _Decoder(parse_float=Decimal, parse_int=Decimal, parse_constant=_no_constant)
# The slower twin that sees every key of an object, for the lines where a field the rules
# read may appear twice (a plain dict keeps only the last).
_PAIRS_DECODER = _Decoder(object_pairs_hook=_object, parse_float=Decimal, parse_int=Decimal,
                          parse_constant=_no_constant)


def _maybe_repeated(text: str) -> bool:
    count = text.count
    return ("\\u" in text or count('"order_id"') > 1 or count('"customer_id"') > 1 or count('"amount"') > 1
            or count('"ordered_at"') > 1)


def show(value, limit: int = 80) -> str:
    """A value as it would appear in JSON, shortened: for messages."""
    if isinstance(value, Decimal):  # parsed from a JSON number: show it as one
        return str(value)
    try:
        text = json.dumps(value, ensure_ascii=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def check_line(raw: bytes, day: date) -> Verdict:
    """The verdict on one line of the day's input (without its line terminator)."""
    try:
        return _check(raw, day)
    except _Rejected as rejected:
        return Verdict(reason=rejected.reason, detail=rejected.detail)


def _check(raw: bytes, day: date) -> Verdict:
    if len(raw) > MAX_LINE_BYTES:
        raise _Rejected("too_long", f"line of {len(raw):,} bytes is longer than the {MAX_LINE_BYTES:,} bytes "
                                    "an order may take; not parsed")
    if raw.startswith(BOM):  # a byte order mark, as Windows tools write at a file's start
        raw = raw[len(BOM):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Rejected("not_utf8", f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} "
                                    "(the rejects keep the line's exact bytes in line_base64)") from None
    if not text.strip():
        return BLANK
    obj = _parse(text)
    repeated = [k for k in getattr(obj, "repeated", ()) if k in FIELDS]
    if repeated:
        raise _Rejected("repeated_field", f"field {show(repeated[0])} appears more than once in the object; "
                                          "which one is meant is unknown")
    return Verdict(order=Order(_order_id(obj), _customer(obj), _amount(obj), _ordered_at(obj, day)))


def _parse(text: str) -> dict:
    try:
        obj = (_PAIRS_DECODER if _maybe_repeated(text) else _DECODER).decode(text)
    except json.JSONDecodeError as exc:
        what = "more data after the JSON value" if exc.msg == "Extra data" else exc.msg.lower()
        raise _Rejected("not_json", f"not JSON: {what} at character {exc.pos + 1}") from None
    except ValueError as exc:  # NaN / Infinity literals
        raise _Rejected("not_json", f"not JSON: {exc}") from None
    except RecursionError:
        raise _Rejected("not_json", "not JSON this parser accepts: nested too deeply") from None
    if not isinstance(obj, dict):
        raise _Rejected("not_object", f"the line is {_kind(obj)} ({show(obj, 40)}), not a JSON object")
    return obj


def _missing_or_kind(obj: dict, field: str, wanted: str) -> str:
    if field not in obj:
        return f"{field} is missing"
    return f"{field} is {_kind(obj[field])} ({show(obj[field])}), must be {wanted}"


def _order_id(obj: dict) -> str:
    value = obj.get("order_id")
    if not isinstance(value, str):
        raise _Rejected("bad_order_id", _missing_or_kind(obj, "order_id", "a string"))
    if not value.strip():
        raise _Rejected("bad_order_id", f"order_id {show(value)} is empty or only whitespace")
    if len(value) > MAX_ORDER_ID_CHARS:
        raise _Rejected("bad_order_id", f"order_id of {len(value):,} characters is longer than {MAX_ORDER_ID_CHARS}")
    if value != value.strip():
        raise _Rejected("bad_order_id", f"order_id {show(value)} has leading or trailing whitespace")
    odd = _ODD_CHAR.search(value)
    if odd is not None:
        code = ord(odd.group())
        what = "an unpaired surrogate" if 0xD800 <= code <= 0xDFFF else "a control or line-break character"
        raise _Rejected("bad_order_id", f"order_id {show(value)} holds {what} (U+{code:04X})")
    return value


def _customer(obj: dict) -> str:
    value = obj.get("customer_id")
    if not isinstance(value, str):
        raise _Rejected("bad_customer", _missing_or_kind(obj, "customer_id", "a string like c0001234"))
    if not _CUSTOMER.fullmatch(value):
        raise _Rejected("bad_customer", f"customer_id {show(value)} is not like c0001234 "
                                        "(a 'c' and 1 to 12 digits 0-9, nothing before or after)")
    return value


def _amount(obj: dict) -> Decimal:
    value = obj.get("amount")
    if not isinstance(value, Decimal):
        raise _Rejected("bad_amount", _missing_or_kind(obj, "amount", "a JSON number like 36.58"))
    if value < 0:
        raise _Rejected("negative_amount", f"amount {value} is negative")
    if value > MAX_AMOUNT:  # compared before rounding: quantize of 1e400 would overflow
        raise _Rejected("amount_too_large", f"amount {value} is above {MAX_AMOUNT} (numeric(12,2))")
    try:
        cents = value.quantize(CENT, ROUND_HALF_UP)
    except InvalidOperation:  # pragma: no cover - bounded above, so quantize cannot overflow
        raise _Rejected("bad_amount", f"amount {value} cannot be rounded to cents") from None
    if cents > MAX_AMOUNT:  # 9999999999.995 rounds up past the maximum
        raise _Rejected("amount_too_large", f"amount {value} rounds to {cents}, above {MAX_AMOUNT} (numeric(12,2))")
    return cents + 0  # + 0 turns -0.00 into 0.00


def _ordered_at(obj: dict, day: date) -> datetime:
    value = obj.get("ordered_at")
    example = "an ISO-8601 timestamp string like 2026-11-20T08:58:10.739Z"
    if isinstance(value, Decimal):
        raise _Rejected("bad_time", f"ordered_at is a number ({show(value)}); epoch times are not accepted, "
                                    f"it must be {example}")
    if not isinstance(value, str):
        raise _Rejected("bad_time", _missing_or_kind(obj, "ordered_at", example))
    moment = _timestamp(value)
    if moment.date() != day:
        raise _Rejected("other_day", f"ordered_at {show(value)} is on {moment.date()} in UTC, "
                                     f"not the load's day {day}")
    return moment


def _timestamp(value: str) -> datetime:
    match = _TIMESTAMP.fullmatch(value)
    if match is None:
        if _DATE_ONLY.fullmatch(value):
            problem = "is a date without a time"
        elif _NO_OFFSET.fullmatch(value):
            problem = "has no UTC offset (end it with Z or an offset like +01:00)"
        else:
            problem = "is not an ISO-8601 timestamp like 2026-11-20T08:58:10.739Z"
        raise _Rejected("bad_time", f"ordered_at {show(value)} {problem}")
    year, month, dom, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    micros = int((fraction or "0").ljust(6, "0")[:6])  # beyond microseconds: truncated
    try:
        if off_m is not None and int(off_m) > 59:
            raise ValueError(f"offset minutes {off_m} above 59")
        offset = timedelta(0) if zulu else (1 if sign == "+" else -1) * timedelta(hours=int(off_h),
                                                                                   minutes=int(off_m))
        local = datetime(int(year), int(month), int(dom), int(hour), int(minute), int(second), micros,
                         tzinfo=timezone(offset))
        return local.astimezone(timezone.utc)
    except (ValueError, OverflowError) as exc:
        raise _Rejected("bad_time", f"ordered_at {show(value)} is not a valid time: {exc}") from None
