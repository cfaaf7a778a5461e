"""`python -m twophase show LOAD` as text (twophase/ops/show.py): the facts of `--json`, one
screen a person reads. Rendered from the dict the command builds, so both say the same."""

from __future__ import annotations

from twophase.ops import show
from twophase.protocol.states import State

LOAD = "orders_daily_totals.manual__2026-11-23T02-51-50.ae12d71747"
SHOWN = {
    "load_id": LOAD, "pipeline": "orders_daily_totals", "run_id": "manual__2026-11-23T02:51:50",
    "state": "ABORTED", "decision": "ABORT",
    "reason": "quality gate: 312 of 3000 input lines rejected (10.40%), above the maximum of 5.00%",
    "data_interval_start": "2026-11-22T00:00:00+00:00", "data_interval_end": "2026-11-23T00:00:00+00:00",
    "counts": {"analytics.customer_daily_totals": 2412, "customer-daily-totals": 2412},
    "expected": {"analytics.customer_daily_totals": 2412, "customer-daily-totals": 2412},
    "began_at": "2026-11-23T02:51:52+00:00", "prepare_s": 31.42, "vote_s": 0.31, "phase2_s": 0.2,
    "exposed_at": None, "exposure_s": None,
    "last_resource": {"participant": "postgres@twophase_stock", "why": "its server has max_prepared_transactions = 0"},
    "input": {"date": "2026-11-22", "rejects": "file:///data/rejects/date=2026-11-22"},
    "metrics": {"input_lines": 3000, "rejected_lines": 312, "rejected_by_reason": {"bad json": 312}},
    "prepare_error": None, "prepare_attempts": 2,
    "audit": {"verdict": "pass", "rules": {"duplicate_keys(analytics.customer_daily_totals)": "pass"}},
    "approval": None,
    "votes": {"kafka": {"yes": True, "count": 2412, "counts": {}, "summary": "2412 records staged", "reason": ""},
              "postgres": {"yes": False, "count": 0, "counts": {}, "summary": "", "reason": "staging emptied"}},
    "history": [{"from": None, "to": "PREPARING", "reason": None, "at": "2026-11-23T02:51:52+00:00"},
                {"from": "PREPARING", "to": "PREPARED", "reason": None, "at": "2026-11-23T02:52:23+00:00"},
                {"from": "PREPARED", "to": "ABORTING", "reason": "quality gate: 312 of 3000",
                 "at": "2026-11-23T02:52:24+00:00"}],
}


def test_the_text_says_the_state_and_why_first_then_what_was_read_and_written():
    text = show.render(SHOWN)
    lines = text.splitlines()
    assert lines[0] == f"load      {LOAD}"
    assert lines[2] == ("state     ABORTED (decision ABORT): quality gate: 312 of 3000 input lines rejected (10.40%), "
                        "above the maximum of 5.00%")
    assert "interval  2026-11-22T00:00:00+00:00 .. 2026-11-23T00:00:00+00:00" in lines
    assert 'input     {"date": "2026-11-22", "rejects": "file:///data/rejects/date=2026-11-22"}' in lines
    assert ("commit    postgres@twophase_stock commits last, without a prepared transaction (its server has "
            "max_prepared_transactions = 0): its commit is the load's decision, once every other participant is "
            "ready") in lines
    assert "rows      Spark computed analytics.customer_daily_totals 2,412 · customer-daily-totals 2,412" in lines
    assert "timings   prepare 31.4 s · vote 0.3 s · phase 2 0.2 s · exposure - (2 prepare attempts)" in lines
    assert 'metrics   input_lines 3,000 · rejected_lines 312 · rejected_by_reason {"bad json": 312}' in lines
    assert "audit     pass (duplicate_keys(analytics.customer_daily_totals) pass)" in lines
    assert "approval  not asked" in lines


def test_each_vote_says_what_it_staged_or_why_it_said_no_and_the_history_reads_in_order():
    lines = show.render(SHOWN).splitlines()
    votes = lines.index("votes")
    assert lines[votes + 1:votes + 3] == ["  kafka     YES         2,412  2412 records staged",
                                          "  postgres  NO              0  staging emptied"]
    history = lines.index("history")
    assert lines[history + 1:history + 4] == ["  2026-11-23T02:51:52+00:00  PREPARING",
                                              "  2026-11-23T02:52:23+00:00  PREPARING -> PREPARED",
                                              "  2026-11-23T02:52:24+00:00  PREPARED -> ABORTING: quality gate: 312 of "
                                              "3000"]
    assert lines[-1].startswith(f"more      python -m twophase show {LOAD} --json (all of it)")


def test_a_load_of_a_source_says_what_it_read_and_how_far_the_source_is_ahead_now():
    def line(lag):
        shown = {**SHOWN, "source": "kafka:default/orders#p: 1200 records", "source_lag": lag}
        return show.render(shown).splitlines()[4]

    assert line(3400) == ("input     kafka:default/orders#p: 1200 records; the source is 3,400 ahead of its "
                          "committed loads now")
    assert line("unknown: broker down") == ("input     kafka:default/orders#p: 1200 records; how far the source is "
                                            "ahead now: unknown: broker down")


def test_a_load_that_only_began_shows_what_it_has_and_dashes_for_the_rest():
    began = {"load_id": "p.r.1", "pipeline": "p", "run_id": "r", "state": "PREPARING", "decision": None,
             "reason": None, "data_interval_start": None, "input": {}, "metrics": {}, "votes": {},
             "history": [], "audit": None, "approval": None, "prepare_attempts": 0}
    lines = show.render(began).splitlines()
    assert lines[2] == "state     PREPARING"
    assert "input     as the job found it" in lines
    assert "timings   prepare - · vote - · phase 2 - · exposure -" in lines
    assert "audit     not audited" in lines and "votes" not in lines and "history" not in lines


def test_a_load_not_finished_says_what_recovery_would_do_with_it():
    """facts adds recovery.outlook for a load not in a terminal state; render shows it."""
    from twophase.log import MemoryLog
    from twophase.protocol import coordinator
    from test_coordinator import make_spec

    log, spec = MemoryLog(), make_spec("run-waits")
    coordinator.begin(log, spec)
    shown = show.facts(log, log.get(spec.load_id), conns=None)
    assert shown["recovery"]["acts_now"] is False
    assert any(line.startswith("waits for in flight for 0 min: its prepare or vote may still run; recovery presumes "
                               "abort in 120 min") for line in show.render(shown).splitlines())
    log.transition(spec.load_id, State.ABORTING, reason="test")
    log.transition(spec.load_id, State.ABORTED)
    assert "recovery" not in show.facts(log, log.get(spec.load_id), conns=None)
