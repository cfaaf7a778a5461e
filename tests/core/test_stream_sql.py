"""The streaming example's fast path (order_sql.with_fast_event, OrderLines.Event in Java)
changes no verdict and no value: orders_stream_totals.judged gives every record the same
reason, customer, amount and time with it as without it (from_json and Spark's casts
alone), on near misses of each of its conditions and on random edits of plain events. And
it is the fast path that reads the sample's events (else it would prove nothing about speed)."""

from __future__ import annotations

import json
import random

import pytest

import orders_stream_totals
from orders_sample.stream import events
from random_edits import edited

BASE = {"order_id": '"o1"', "customer_id": '"c1"', "amount": "12.5", "ordered_at": '"2026-11-27T10:00:00Z"'}
NEAR_MISSES = {
    "customer_id": ['""', '" "', '"a b"', '"c\\u0031"', '"caf\u00e9"', "1", "null", '"\t"', '"' + "x" * 5000 + '"'],
    "amount": ["0", "0.0", "-1", "0.01", "01", "1.", ".5", "1.234", "9999999999.99", "10000000000", "1e2", "1E2",
               '"12.5"', '"12.50"', '" 12.5"', '"12.5"x', '"-3"', '"0"', "true", "null", '"abc"', "12.50", "7"],
    "ordered_at": ['"2026-11-27T10:00:00+00:00"', '"2026-11-27T10:00:00.123+05:30"', '"2026-11-27T10:00:00-08:00"',
                   '"2026-11-27T10:00:00-00:00"', '"2026-11-27T10:00:00+17:59"', '"2026-11-27T10:00:00+18:00"',
                   '"2026-11-27T10:00:00+5:30"', '"2026-11-27T10:00:00+0530"', '"2026-02-30T10:00:00Z"',
                   '"2024-02-29T10:00:00Z"', '"1899-12-31T23:59:59Z"', '"0001-01-01T00:00:00Z"',
                   '"2026-11-27T24:00:00Z"', '"2026-11-27T10:00:00.1234567Z"', '"2026-11-27 10:00:00Z"',
                   '"2026-11-27T10:00:00"', '"2026-11-27"', '"yesterday"', "1", '"2026-11-27t10:00:00z"'],
}
SPELLINGS = [
    '{"customer_id":"c1","amount":12.5,"ordered_at":"2026-11-27T10:00:00Z"}',
    '{"ordered_at": "2026-11-27T10:00:00Z", "amount": 12.5, "customer_id": "c1"}',
    '{"customer_id":"c1","amount":12.5,"ordered_at":"2026-11-27T10:00:00Z","customer_id":"c2"}',
    '{"customer_id":"c1","amount":12.5,"amount":13,"ordered_at":"2026-11-27T10:00:00Z"}',
    '{"customer_id":"c1","amount":12.5,"ordered_at":"2026-11-27T10:00:00Z","x":{"y":1}}',
    '{"customer_id":"c1","amount":12.5,"ordered_at":"2026-11-27T10:00:00Z"} ',
    '{"customer_id":"c1","amount":12.5,"ordered_at":"2026-11-27T10:00:00Z"} x',
    '{"customer_id":"c1","amount":12.5,"ordered_at":"2026-11-27T10:00:00Z",}',
    '{"Customer_id":"c1","amount":12.5,"ordered_at":"2026-11-27T10:00:00Z"}',
    '{"customer_id":"c1","amount":12.5}', '{"amount":12.5,"ordered_at":"2026-11-27T10:00:00Z"}', "{}", "[]", "",
    "not json", '"c1"', "null",
]


def judged(spark, values: list[str], java: bool) -> list:
    """The job's judging of the values, in their order (times as microseconds: an edit can
    make a year that Python's datetime cannot hold)."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(v.encode(), 0, n) for n, v in enumerate(values)],
                                  "value binary, partition int, offset long")
    return (orders_stream_totals.judged(frame, java).withColumn("at", F.unix_micros("at"))
            .orderBy("offset").collect())


def assert_same(spark, values: list[str]) -> list:
    with_java, without = judged(spark, values, True), judged(spark, values, False)
    differ = [(values[a["offset"]][:120], a, b) for a, b in zip(with_java, without) if a != b]
    assert not differ, f"{len(differ)} of {len(values)} records judged otherwise, e.g. {differ[:3]}"
    return with_java


def near_misses() -> list[str]:
    values = []
    for field, spellings in NEAR_MISSES.items():
        values += ["{" + ",".join(f'"{k}":{v}' for k, v in {**BASE, field: spelling}.items()) + "}"
                   for spelling in spellings]
    return values + SPELLINGS


def test_near_misses_of_the_fast_path_are_judged_as_without_it(spark):
    from order_sql import FAST_EVENT

    rows = assert_same(spark, near_misses())
    assert spark.catalog.functionExists(FAST_EVENT), "OrderLines.java was not registered"
    assert {r["reason"] for r in rows} == {None, "not_json", "missing_customer", "amount_not_positive",
                                           "bad_timestamp"}


@pytest.mark.parametrize("seed", [1, 2])
def test_random_edits_of_plain_events_are_judged_as_without_it(spark, seed):
    rng = random.Random(seed)
    alphabet = list('0123456789"{}:,. -_+acdeTZ\\\t') + ["\u00e9", "\x7f"]
    plain = [json.dumps(value, separators=rng.choice([(",", ":"), (", ", ": ")]))
             for _, value in events(0, 100)]
    values = edited(rng, plain, 10_000, alphabet, [0, 1, 1, 2])
    rows = assert_same(spark, values)
    assert 1_000 < sum(1 for r in rows if r["reason"] is None) < 9_000


def test_the_sample_events_take_the_fast_path(spark):
    from pyspark.sql import functions as F

    from order_sql import in_java, with_fast_event

    values = [json.dumps(value).encode() for _, value in events(0, 2000)]
    frame = spark.createDataFrame([(v,) for v in values], "value binary")
    assert in_java(spark, "unused")
    assert with_fast_event(frame, "value").where(F.col("_fast").isNotNull()).count() == len(values)
