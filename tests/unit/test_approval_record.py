"""The approval record (twophase.gates.approval): its two steps, what the vote reads from it,
and where recovery's deadline starts."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from twophase.gates import approval

pytestmark = pytest.mark.serverless

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)


def test_asked_then_answered_keeps_when_it_was_asked_and_who_answered():
    asked = approval.asked(T0, timedelta(minutes=30))
    assert asked == {"asked_at": "2026-11-23T12:00:00+00:00", "timeout_at": "2026-11-23T12:30:00+00:00"}
    done = approval.answered(asked, True, T0 + timedelta(minutes=4), by="alice", by_id="7")
    assert done == {**asked, "decision": "approved", "by": "alice", "by_id": "7",
                    "answered_at": "2026-11-23T12:04:00+00:00", "timed_out": False, "run_ended": False}
    assert approval.describe(done) == "approved by alice at 2026-11-23T12:04:00+00:00"


@pytest.mark.parametrize("record, required, reasons", [
    (None, False, []),
    ({"asked_at": "x", "timeout_at": "y", "decision": "rejected"}, False, []),
    (None, True, ["no approval was asked (the approve task did not run, or failed before it asked)"]),
    ({"asked_at": "a", "timeout_at": "b"}, True, ["waiting for approval since a, at most until b"]),
    ({"asked_at": "a", "timeout_at": "b", "decision": "rejected", "by": "bob", "answered_at": "c"}, True,
     ["rejected by bob at c"]),
    ({"asked_at": "a", "timeout_at": "b", "decision": "rejected", "by": None, "answered_at": "b", "timed_out": True},
     True, ["rejected: nobody answered the approval asked at a before it timed out at b"]),
    ({"asked_at": "a", "timeout_at": "b", "decision": "approved", "by": "alice", "answered_at": "c"}, True, []),
], ids=["not-required", "not-required-rejected", "never-asked", "unanswered", "rejected", "timed-out", "approved"])
def test_the_vote_aborts_unless_a_required_approval_was_given(record, required, reasons):
    assert approval.reasons_to_abort(record, required) == reasons


def test_recovery_deadline_counts_from_the_answer_or_the_end_of_the_wait():
    began = T0 - timedelta(hours=5)
    asked = approval.asked(T0, timedelta(hours=3))
    assert approval.deadline_counts_from(began, None) == began
    assert approval.deadline_counts_from(began, asked) == T0 + timedelta(hours=3)
    answered = approval.answered(asked, False, T0 + timedelta(minutes=9), by="bob")
    assert approval.deadline_counts_from(began, answered) == T0 + timedelta(minutes=9)


def test_time_to_visible_data_counts_from_an_approval_only():
    asked = approval.asked(T0, timedelta(hours=1))
    approved = approval.answered(asked, True, T0 + timedelta(minutes=2), by="alice")
    assert approval.to_visible_s(approved, T0 + timedelta(minutes=2, seconds=3.5)) == 3.5
    assert approval.to_visible_s(approved, None) is None
    assert approval.to_visible_s(approval.answered(asked, False, T0, by="bob"), T0) is None


@pytest.mark.parametrize("bad", [
    lambda: approval.asked(T0, timedelta(0)),
    lambda: approval.answered({}, True, T0),
    lambda: approval.answered(approval.asked(T0, timedelta(1)), True, T0, timed_out=True),
], ids=["no-wait", "not-asked", "approved-by-timeout"])
def test_an_impossible_approval_is_refused(bad):
    with pytest.raises(ValueError):
        bad()
