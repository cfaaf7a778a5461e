"""The Kafka copy's budgets (participants/kafka/budget.py), checked by the vote: the
copy's estimated time against its transaction's timeout, and the staged records' expiry
against the copy's end."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from twophase.participants.kafka.budget import MIN_RECORDS, RETENTION_MARGIN, copy_pace, over_budget

pytestmark = pytest.mark.serverless

NOW = datetime(2026, 11, 23, 12, tzinfo=timezone.utc)
WEEK_MS = 7 * 24 * 3600 * 1000


def copy(count: int, seconds: float, kind: str = "done") -> dict:
    return {"kind": kind, "count": count, "seconds": seconds}


def test_the_pace_is_the_median_of_earlier_copies_big_enough_to_measure_it():
    earlier = [copy(100_000, 1.0), copy(100_000, 4.0), copy(50_000, 1.0),  # 100k, 25k, 50k records/s
               copy(MIN_RECORDS - 1, 0.001),  # mostly fixed cost: not a pace
               copy(900_000, 1.0, kind="already_done"),  # an earlier attempt copied: no pace
               copy(80_000, 0.0)]
    assert copy_pace(earlier) == (50_000, 3)
    assert copy_pace([copy(10, 0.5)]) is None and copy_pace([]) is None


@pytest.mark.parametrize("records, timeout_ms, over", [
    (400_000, 10_000, False),   # 8 s at 50k/s: 80% of 10 s, just fits
    (400_001, 10_000, True),
    (10_000_000, 900_000, False),  # 200 s in 15 minutes
])
def test_a_copy_longer_than_most_of_its_transaction_timeout_is_over_budget(records, timeout_ms, over):
    why = over_budget(records, [copy(100_000, 2.0)], timeout_ms, {"s": WEEK_MS}, NOW, NOW)
    assert bool(why) == over
    if over:
        assert f"copying {records} records would take about 8.0 s at 50000 records/s" in why
        assert "raise KafkaTarget.transaction_timeout_ms" in why and f"({timeout_ms} ms)" in why


def test_without_an_earlier_copy_to_measure_only_retention_is_checked():
    assert over_budget(10**9, [], 1000, {"s": WEEK_MS}, NOW, NOW) == ""
    assert over_budget(10**9, [copy(5, 1.0)], 1000, {"s": WEEK_MS}, NOW, NOW) == ""


def test_staged_records_that_may_expire_before_the_copy_ends_are_over_budget():
    hour_ms = 3600 * 1000
    margin = RETENTION_MARGIN
    staged = NOW - timedelta(hours=1) + margin + timedelta(seconds=1)  # expires 1 s after the margin ends
    assert over_budget(1000, [], 900_000, {"stage": hour_ms}, staged, NOW) == ""
    staged -= timedelta(seconds=2)
    why = over_budget(1000, [], 900_000, {"stage": hour_ms}, staged, NOW)
    assert why.startswith("the staged records in stage may expire from ") and "(retention.ms 3600000)" in why
    assert "raise KafkaTarget.staging_retention_ms" in why
    # the copy's own estimated time counts too: 20 s at 50k records/s
    staged = NOW - timedelta(hours=1) + margin + timedelta(seconds=10)
    assert over_budget(1_000_000, [copy(100_000, 2.0)], 900_000, {"stage": hour_ms}, staged, NOW) != ""
    assert over_budget(1_000_000, [copy(100_000, 2.0)], 900_000, {"stage": -1}, staged, NOW) == "", \
        "retention.ms -1 keeps records forever"


def test_both_budgets_over_say_both_and_each_names_its_setting():
    why = over_budget(10**7, [copy(100_000, 2.0)], 60_000, {"a": 60_000, "b": WEEK_MS}, NOW, NOW)
    assert why.count("; ") == 1 and "KafkaTarget.transaction_timeout_ms" in why and \
        "KafkaTarget.staging_retention_ms" in why and "records in a " in why
