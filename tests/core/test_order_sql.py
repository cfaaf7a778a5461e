"""The example's fast path (spark_jobs/order_sql.py) changes no verdict, in either of its
forms (OrderLines.Daily in Java, and the regular expression a session without Java uses): the
job's classify (fast path, then check_line for every other line) gives each line of the
hostile catalog, and of near misses of each of the fast path's conditions, exactly what
order_rules.check_line gives it: verdict, reason, detail and the order's values. And
it is the fast path that judges a plain sample day's valid lines (else it would prove
nothing about speed)."""

from __future__ import annotations

import json
from datetime import date, timezone

import pytest

import orders_daily_totals
from hostile.catalog import catalog, file_lines
from order_rules import check_line
from order_sql import coded
from orders_sample.generate import generate
from random_edits import edited

DAY = date(2041, 3, 4)
BASE = {"order_id": '"o1"', "customer_id": '"c1"', "amount": "12.5", "ordered_at": '"2041-03-04T08:00:00Z"'}
NEAR_MISSES = {
    "order_id": ['""', '" o1"', '"o1 "', '"o 1"', '"' + "x" * 200 + '"', '"' + "x" * 201 + '"', '"o\\u0031"',
                 '"caf\u00e9"', "1", "null", '"a\\"b"', '"\t"'],
    "customer_id": ['"c"', '"c123456789012"', '"c1234567890123"', '"C1"', '"c1 "', '"c-1"', '"c\u0661"', "7"],
    "amount": ["0", "0.0", "0.00", "-0", "-0.0", "-1", "01", "1.", ".5", "1.234", "9999999999.99",
               "9999999999.995", "10000000000", "99999999999", "1e2", "1E2", "1.5e1", '"12.5"', "true", "null"],
    "ordered_at": ['"2041-03-04T23:59:59Z"', '"2041-03-04T00:00:00.000001Z"', '"2041-03-04T24:00:00Z"',
                   '"2041-03-04T23:60:00Z"', '"2041-03-04T23:59:60Z"', '"2041-03-04T08:00:00.1234567Z"',
                   '"2041-03-04T08:00:00.123456789Z"', '"2041-03-04t08:00:00Z"', '"2041-03-04T08:00:00z"',
                   '"2041-03-04T08:00:00+00:00"', '"2041-03-04T01:00:00+02:00"', '"2041-03-03T23:00:00Z"',
                   '"2041-03-04 08:00:00Z"', '"2041-03-04T8:00:00Z"', '"2041-03-04T08:00:00.Z"', "1"],
}
SPELLINGS = [
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"}',
    '{"order_id": "o1", "customer_id": "c1", "amount": 12.5, "ordered_at": "2041-03-04T08:00:00Z"}',
    '{"ordered_at":"2041-03-04T08:00:00Z","amount":12.5,"customer_id":"c1","order_id":"o1"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","currency":"EUR"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","n":-0.5}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","x":"\u00e9"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","x":{"y":1}}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","x":"a\\nb"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","Amount":1}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","order_id":"o2"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"amount":13,"ordered_at":"2041-03-04T08:00:00Z"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","note":"\\"amount\\":1"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","note":"amount\\":1"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"} ',
    ' {"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"}{}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z",}',
    '{"order_id":"o1" ,"customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"}',
    '{"order_id" :"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","n":NaN}',
    '\ufeff{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"}',
    *('{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"}' + end
      for end in ("\n", "\r", "\r\n", "\u0085", "\u2028", "\u2029", "\t")),
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","tab":"a\tb"}',
    '{"order_id":"o\t1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z"}',
    '{"order_id":"o1","customer_id":"c1","amount":12.5,"ordered_at":"2041-03-04T08:00:00Z","pad":"'
    + "y" * 5000 + '"}',
]


def near_misses() -> list[bytes]:
    lines = []
    for field, values in NEAR_MISSES.items():
        for value in values:
            members = {**BASE, field: value}
            lines.append(("{" + ",".join(f'"{k}":{v}' for k, v in members.items()) + "}").encode())
        lines.append(("{" + ",".join(f'"{k}":{v}' for k, v in BASE.items() if k != field) + "}").encode())
    return lines + [s.encode() for s in SPELLINGS] + [b'{"order_id":"o1","customer_id":"c1","amount":1\xff}',
                                                       b"", b"   ", b"[]", b"{}"]


FORMS = pytest.mark.parametrize("java", [True, False], ids=["java", "regex"])


@pytest.fixture
def java_used(spark, java):
    """Fails the test when the Java form was asked for but is not registered in the
    session (the stack has a JDK: the fast path must really run in Java here)."""
    from order_sql import FAST_ORDER

    yield java
    assert not java or spark.catalog.functionExists(FAST_ORDER), "OrderLines.java was not registered"


def judged(spark, lines: list[bytes], java: bool) -> list[tuple]:
    """The job's classify over the lines; (verdict, reason, detail, order) in line order."""
    frame = spark.createDataFrame([(raw, f"line-{n:06d}") for n, raw in enumerate(lines)], "raw binary, file string")
    rows = sorted(orders_daily_totals.classify(frame, DAY, java).collect(), key=lambda r: r["file"])
    assert [r["file"] for r in rows] == [f"line-{n:06d}" for n in range(len(lines))]
    # pyspark gives timestamps as naive datetimes of the local time zone: made UTC, as check_line's.
    return [(r["verdict"], r["reason"], r["detail"],
             (r["order_id"], r["customer_code"], r["cents"], r["ordered_at"].astimezone(timezone.utc))
             if r["verdict"] == "valid" else None)
            for r in rows]


def expected(raw: bytes) -> tuple:
    verdict = check_line(raw, DAY)
    kind = "blank" if verdict.blank else "valid" if verdict.order else "rejected"
    order = coded(verdict.order) if verdict.order else None
    return kind, verdict.reason, verdict.detail, order


@FORMS
@pytest.mark.parametrize("source", ["catalog", "near misses"])
def test_classify_gives_every_line_check_lines_verdict(spark, source, java_used):
    if source == "catalog":
        lines = [raw for case in catalog(DAY) for name, data in case.files.items() if name not in case.skipped
                 for raw in file_lines(name, data)]
    else:
        lines = near_misses()
    got = judged(spark, lines, java_used)
    differ = [(raw[:120], g, e) for raw, g, e in zip(lines, got, map(expected, lines)) if g != e]
    assert not differ, f"{len(differ)} of {len(lines)} lines judged otherwise than check_line, e.g. {differ[:3]}"
    assert {g[0] for g in got} >= {"valid", "rejected"}


@FORMS
def test_the_fast_path_judges_a_sample_days_valid_lines(spark, tmp_path, java_used):
    from order_sql import with_fast_order
    from pyspark.sql import functions as F

    made = generate(tmp_path, DAY, 2000, bad_share=0.05)
    lines = [raw for path in sorted(made.folder.iterdir()) for raw in path.read_bytes().splitlines()]
    frame = spark.createDataFrame([(raw,) for raw in lines], "raw binary")
    fast = with_fast_order(frame, "raw", DAY, java_used).where(F.col("order_id").isNotNull()).count()
    valid = sum(1 for raw in lines if check_line(raw, DAY).order is not None)
    assert fast == valid == len(lines) - made.bad_lines, (fast, valid, len(lines), made.bad_lines)
    assert json.loads(lines[0])["currency"] == "EUR"  # the sample's extra field takes the fast path too


@FORMS
def test_customer_ids_keep_their_leading_zeros_through_their_code(spark, java_used):
    """dedupe and totals aggregate a customer id as a number (customer_code): every form
    order_rules allows comes back the same, and the fast path codes it as check_line's
    order does."""
    from order_sql import customer_code, customer_of

    ids = ["c0", "c1", "c00", "c0001234", "c1234", "c000000000000", "c999999999999", "c100000000000"]
    lines = [(json.dumps({"order_id": "o1", "customer_id": i, "amount": 1, "ordered_at": "2041-03-04T08:00:00Z"}),
              customer_code(i)) for i in ids]
    frame = orders_daily_totals._fast_path(spark.createDataFrame(
        [(text.encode(), "f", code) for text, code in lines], "raw binary, file string, code long"), DAY, java_used)
    rows = frame.select("code", "customer_code", customer_of("code").alias("back")).collect()
    assert [r["back"] for r in rows] == ids
    assert [r["customer_code"] for r in rows] == [r["code"] for r in rows], "the fast path's code is check_line's"
    assert len({r["code"] for r in rows}) == len(ids), "each id its own code"


def test_both_forms_take_the_same_lines_with_the_same_values(spark):
    """OrderLines.Daily and the regular expression, on 20,000 random edits of plain orders
    (characters the grammar cares about inserted, deleted, replaced): the same lines take
    the fast path, with the same four values."""
    import random

    from order_sql import FAST_ORDER, with_fast_order

    rng = random.Random(25)
    alphabet = list('0123456789"{}:,. -_azcTZe\\\t') + ["\u00e9", "\x7f", "\x1f"]
    plain = [json.dumps({"order_id": f"o{i}", "customer_id": f"c{i:04d}", "amount": rng.choice([0, 1.5, 12.25, 99]),
                         "ordered_at": f"2041-03-04T{i % 24:02d}:0{i % 10}:59.{i % 999:03d}Z", "n": -i, "note": "a b"},
                        separators=rng.choice([(",", ":"), (", ", ": ")])) for i in range(200)]
    lines = [(line.encode(), n) for n, line in enumerate(edited(rng, plain, 20_000, alphabet, [0, 1, 1, 2, 3]))]
    frame = spark.createDataFrame(lines, "raw binary, n long")
    java, regex = (with_fast_order(frame, "raw", DAY, form).drop("raw").orderBy("n").collect()
                   for form in (True, False))
    assert spark.catalog.functionExists(FAST_ORDER)
    differ = [(lines[a["n"]][0], a, b) for a, b in zip(java, regex) if a != b]
    assert not differ, f"{len(differ)} of {len(lines)} lines differ, e.g. {differ[:3]}"
    taken = sum(1 for row in java if row["order_id"] is not None)
    assert 2_000 < taken < 18_000, taken  # both kinds of line, many of each
