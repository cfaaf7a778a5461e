"""The transaction log's contract (twophase/log/contract.py), checked once per
implementation: the Postgres log of the stack and the in-memory log of the serverless
tests keep the same rules and answer the same reads. Each test works on loads of a
pipeline of its own, so tests on other workers (and their loads) are never in its way.
"""

from __future__ import annotations

import threading
from dataclasses import replace
import uuid
from datetime import timedelta

import pytest

from twophase.gates.quarantine import Kept
from twophase.ids import load_id_for
from twophase.log import DriverBusy, LeaseLost, StateConflict, Superseded, UnknownLoad
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.protocol.states import IllegalTransition, State
from twophase.protocol.votes import Vote
from twophase.sources.memory import MemorySource
from twophase.spec import LoadSpec

TABLE, TOPIC = "shop.orders", "orders"


@pytest.fixture
def pipeline() -> str:
    return f"logc_{uuid.uuid4().hex[:10]}"


def spec_of(pipeline: str, run: str = "run-1", interval: tuple[str, str] | None = None) -> LoadSpec:
    return LoadSpec(load_id=load_id_for(pipeline, run), pipeline=pipeline, run_id=run,
                    targets=(PostgresTarget(TABLE), KafkaTarget(TOPIC, key_column="customer_id")),
                    data_interval=interval)


def begun(log, pipeline: str, run: str = "run-1", **more) -> str:
    load, created = log.begin(spec_of(pipeline, run, **more))
    assert created
    return load.load_id


def to_state(log, load_id: str, *path: State) -> None:
    for state in path:
        log.transition(load_id, state)


def vote(name: str, n: int, **more) -> Vote:
    target = TABLE if name == "postgres" else TOPIC
    return Vote(name, True, n, committable={"gid": f"g-{n}"}, counts={target: n}, summary=f"{n} staged", **more)


# -- begin and reads ------------------------------------------------------------------------


def test_begin_writes_a_preparing_load_once(log, pipeline):
    spec = spec_of(pipeline)
    load, created = log.begin(spec)
    assert created and load.state == State.PREPARING and load.load_id == spec.load_id
    assert (load.pipeline, load.run_id, load.prepare_attempt, load.decision) == (pipeline, "run-1", 0, None)
    assert load.spec() == spec, "the logged spec is the one begun"
    again, created = log.begin(spec)
    assert not created and again == load
    assert [(t.from_state, t.to_state) for t in log.history(spec.load_id)] == [(None, "PREPARING")]


def test_begin_of_an_interval_plans_with_the_intervals_other_loads_and_may_refuse(log, pipeline):
    interval = ("2026-11-20T00:00:00+00:00", "2026-11-21T00:00:00+00:00")
    first = begun(log, pipeline, "run-1", interval=interval)
    begun(log, pipeline, "run-other-day", interval=("2026-11-21T00:00:00+00:00", "2026-11-22T00:00:00+00:00"))
    seen = []

    def refuse(others):
        seen.extend(o.load_id for o in others)
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        log.begin(spec_of(pipeline, "run-2", interval=interval), plan=refuse)
    assert seen == [first], "plan sees the other loads of the same interval only"
    with pytest.raises(UnknownLoad):
        log.get(load_id_for(pipeline, "run-2"))
    load, created = log.begin(spec_of(pipeline, "run-2", interval=interval), plan=lambda others: spec_of(
        pipeline, "run-2", interval=interval))
    assert created and load.data_interval_start is not None


def test_begin_of_a_sourced_load_fixes_its_range_with_the_sources_other_loads(log, pipeline):
    source, other = MemorySource(f"{pipeline}-feed"), MemorySource(f"{pipeline}-other")

    def sourced(run, src=source):
        return replace(spec_of(pipeline, run), source=src)

    def fixed_after(others, run, src=source):
        seen.append([o.load_id for o in others])
        return replace(sourced(run, src), source_range={"source": src.key, "kind": "memory",
                                                        "position": {"start": len(others), "end": len(others) + 1}})

    seen: list = []
    first, created = log.begin(sourced("run-1"), fix=lambda _, others: fixed_after(others, "run-1"))
    assert created and first.source == source.key and first.source_range["position"] == {"start": 0, "end": 1}
    assert first.spec().source == source and first.spec().source_range == first.source_range
    log.begin(sourced("run-x", other), fix=lambda _, others: fixed_after(others, "run-x", other))
    def refuse(_, others):
        seen.append([o.load_id for o in others])
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        log.begin(sourced("run-2"), fix=refuse)
    with pytest.raises(UnknownLoad):
        log.get(load_id_for(pipeline, "run-2"))
    second, _ = log.begin(sourced("run-2"), fix=lambda _, others: fixed_after(others, "run-2"))
    assert second.source_range["position"] == {"start": 1, "end": 2}
    again, created = log.begin(sourced("run-2"), fix=lambda _, others: pytest.fail("a begun load is not fixed again"))
    assert not created and again == second
    assert seen == [[], [], [first.load_id], [first.load_id]], "fix sees the other loads of the same source only"
    assert [x.load_id for x in log.of_source(source.key)] == [first.load_id, second.load_id]


def test_a_load_of_an_interval_and_a_source_is_fixed_as_it_was_planned(log, pipeline):
    """A load with both (an interval's folder): fix gets the spec plan returned, so what
    plan decided (the loads a replace replaces) is logged with the range."""
    interval = ("2026-11-20T00:00:00+00:00", "2026-11-21T00:00:00+00:00")
    spec = replace(spec_of(pipeline, interval=interval), source=MemorySource(f"{pipeline}-day"))
    planned = replace(spec, replaces=("an-earlier-load",))
    fixed = {"source": spec.source.key, "kind": "memory", "position": {"start": 0, "end": 2}}
    got = []

    def fix(current, others):
        got.append(current)
        return replace(current, source_range=fixed)

    load, created = log.begin(spec, plan=lambda others: planned, fix=fix)
    assert created and got == [planned]
    logged = load.spec()
    assert (logged.replaces, logged.source_range, logged.source) == (planned.replaces, fixed, planned.source)
    assert load.data_interval_start is not None


def test_a_skip_of_a_source_is_decided_with_its_loads_and_skips_and_kept_with_who_and_why(log, pipeline):
    source = MemorySource(f"{pipeline}-feed")
    load, _ = log.begin(replace(spec_of(pipeline), source=source), fix=lambda _, others: replace(
        spec_of(pipeline), source=source, source_range={"source": source.key, "kind": "memory",
                                                        "position": {"start": 0, "end": 3}}))
    seen: list = []

    def decide(loads, skips):
        seen.append(([x.load_id for x in loads], [s.source_range["position"] for s in skips]))
        return {"source": source.key, "kind": "memory", "position": {"start": 3 + 2 * len(skips),
                                                                     "end": 5 + 2 * len(skips)}}

    def refuse(loads, skips):
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        log.skip(source.key, refuse, "ops", "nothing")
    assert log.skips(source.key) == []
    first = log.skip(source.key, decide, "ops", "retention outran the pipeline")
    second = log.skip(source.key, decide, "ana", "again")
    assert (first.source, first.by, first.why, first.source_range["position"]) == (
        source.key, "ops", "retention outran the pipeline", {"start": 3, "end": 5})
    assert log.skips(source.key) == [first, second] and first.at <= second.at
    assert seen == [([load.load_id], []), ([load.load_id], [{"start": 3, "end": 5}])]
    assert log.skips(f"{source.key}-other") == []


def test_an_unknown_load_is_refused_by_every_rule_and_read_as_unknown(log, pipeline):
    missing = load_id_for(pipeline, "never-begun")
    with pytest.raises(UnknownLoad):
        log.get(missing)
    for change in (lambda: log.transition(missing, State.PREPARED), lambda: log.claim_prepare(missing),
                   lambda: log.record_vote(missing, vote("postgres", 1)), lambda: log.mark_exposed(missing),
                   lambda: log.set_expected(missing, {TABLE: 1})):
        with pytest.raises(UnknownLoad):
            change()
    assert log.votes(missing) == {} and log.history(missing) == [] and log.states_of([missing]) == {}


def test_what_a_read_returns_never_changes_the_log(log, pipeline):
    lid = begun(log, pipeline)
    log.record_vote(lid, vote("postgres", 3))
    load, votes = log.get(lid), log.votes(lid)
    load.participants.clear()
    votes["postgres"].counts[TABLE] = 99
    assert log.get(lid).participants and log.votes(lid)["postgres"].counts == {TABLE: 3}


def test_the_reads_of_many_loads(log, pipeline):
    a, b, c = (begun(log, pipeline, f"run-{i}") for i in range(3))
    to_state(log, b, State.PREPARED, State.COMMITTING, State.COMMITTED)
    to_state(log, c, State.ABORTING)
    assert [x.load_id for x in log.recent(10, pipeline)] == [c, b, a]
    assert [x.load_id for x in log.recent(2, pipeline)] == [c, b]
    assert [x.load_id for x in log.unresolved(pipeline)] == [a, c], "oldest first, terminal ones left out"
    assert log.states_of([a, b, "nope"]) == {a: State.PREPARING, b: State.COMMITTED}
    assert log.last_committed(pipeline, other_than=a).load_id == b
    assert log.last_committed(pipeline, other_than=b) is None
    log.record_vote(a, vote("postgres", 2))
    assert log.votes_of([a, b]) == {a: {"postgres": vote("postgres", 2)}, b: {}}


# -- transitions ----------------------------------------------------------------------------


def test_a_transition_logs_state_decision_timestamp_and_history(log, pipeline):
    lid = begun(log, pipeline)
    load, changed = log.transition(lid, State.PREPARED)
    assert changed and load.state == State.PREPARED and load.prepared_at is not None and load.decision is None
    load, changed = log.transition(lid, State.COMMITTING, expect=[State.PREPARED], reason="all yes")
    assert changed and (load.decision, load.reason) == ("COMMIT", "all yes") and load.decided_at is not None
    load, changed = log.transition(lid, State.COMMITTED)
    assert changed and load.finished_at is not None and load.reason == "all yes", "a move without reason keeps it"
    assert [(t.from_state, t.to_state, t.reason) for t in log.history(lid)] == [
        (None, "PREPARING", None), ("PREPARING", "PREPARED", None), ("PREPARED", "COMMITTING", "all yes"),
        ("COMMITTING", "COMMITTED", None)]


def test_a_repeated_transition_changes_nothing(log, pipeline):
    lid = begun(log, pipeline)
    to_state(log, lid, State.PREPARED, State.ABORTING)
    before = log.get(lid)
    load, changed = log.transition(lid, State.ABORTING, expect=[State.PREPARED], reason="again")
    assert not changed and load == before, "already there: even a stale expect is no conflict"
    assert len(log.history(lid)) == 3


@pytest.mark.parametrize("path, to, expect, error", [
    ((), State.COMMITTING, None, IllegalTransition),
    ((State.PREPARED,), State.COMMITTED, None, IllegalTransition),
    ((State.PREPARED, State.ABORTING, State.ABORTED), State.COMMITTING, None, IllegalTransition),
    ((State.PREPARED, State.COMMITTING), State.ABORTING, [State.PREPARED], StateConflict),
    ((), State.PREPARED, [State.PREPARED], StateConflict),
])
def test_a_refused_transition_changes_nothing(log, pipeline, path, to, expect, error):
    lid = begun(log, pipeline)
    to_state(log, lid, *path)
    before, history = log.get(lid), log.history(lid)
    with pytest.raises(error):
        log.transition(lid, to, expect=expect, reason="refused")
    assert log.get(lid) == before and log.history(lid) == history


def test_of_two_racing_decisions_exactly_one_wins(log, pipeline):
    """Two actors decide at once, each expecting PREPARED: one moves the load, the other
    gets StateConflict (threads; Postgres locks the load's row)."""
    for run in range(5):
        lid = begun(log, pipeline, f"race-{run}")
        log.transition(lid, State.PREPARED)
        results, start = {}, threading.Barrier(2)

        def decide(to):
            start.wait()
            try:
                results[to] = log.transition(lid, to, expect=[State.PREPARED])[1]
            except StateConflict as exc:
                results[to] = exc

        threads = [threading.Thread(target=decide, args=(to,)) for to in (State.COMMITTING, State.ABORTING)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        winners = [to for to, r in results.items() if r is True]
        assert len(winners) == 1 and isinstance(results[({State.COMMITTING, State.ABORTING} - set(winners)).pop()],
                                                StateConflict), results
        assert log.get(lid).state == winners[0] and len(log.history(lid)) == 3


# -- prepare attempts -----------------------------------------------------------------------


def test_each_prepare_attempt_claims_the_next_number_and_drops_the_last_ones_votes(log, pipeline):
    lid = begun(log, pipeline)
    assert log.claim_prepare(lid) == 1
    log.record_vote(lid, vote("postgres", 5), attempt=1)
    log.record_prepare_error(lid, "attempt 1 failed", attempt=1)
    assert log.claim_prepare(lid) == 2
    load = log.get(lid)
    assert (load.prepare_attempt, load.attempt, load.prepare_error) == (2, 2, None)
    assert log.votes(lid) == {}, "the votes of attempt 1 are gone"


def test_a_superseded_attempt_writes_nothing(log, pipeline):
    lid = begun(log, pipeline)
    log.claim_prepare(lid)
    log.claim_prepare(lid)
    for write in (lambda: log.record_vote(lid, vote("postgres", 5), attempt=1),
                  lambda: log.set_expected(lid, {TABLE: 5}, attempt=1),
                  lambda: log.transition(lid, State.PREPARED, attempt=1)):
        with pytest.raises(Superseded) as refused:
            write()
        assert (refused.value.attempt, refused.value.latest) == (1, 2)
    log.record_prepare_error(lid, "attempt 1's error", attempt=1)
    load = log.get(lid)
    assert (load.state, load.expected, load.prepare_error, log.votes(lid)) == (State.PREPARING, None, None, {})


def test_no_attempt_is_claimed_or_written_once_the_load_is_prepared(log, pipeline):
    lid = begun(log, pipeline)
    attempt = log.claim_prepare(lid)
    log.set_expected(lid, {TABLE: 5, TOPIC: 5}, {"input_lines": 7}, rows=5, attempt=attempt)
    log.record_vote(lid, vote("postgres", 5), attempt=attempt)
    log.transition(lid, State.PREPARED, attempt=attempt)
    with pytest.raises(StateConflict):
        log.claim_prepare(lid)
    with pytest.raises(Superseded, match="too late"):
        log.record_vote(lid, vote("kafka", 5), attempt=attempt)
    load = log.get(lid)
    assert (load.expected, load.expected_rows, load.metrics) == ({TABLE: 5, TOPIC: 5}, 5, {"input_lines": 7})
    assert log.votes(lid) == {"postgres": vote("postgres", 5)}


def test_a_vote_is_kept_whole_and_replaced_by_the_participants_next(log, pipeline):
    lid = begun(log, pipeline)
    first = vote("postgres", 5, reason="")
    log.record_vote(lid, first)
    log.record_vote(lid, vote("kafka", 5))
    assert log.votes(lid) == {"postgres": first, "kafka": vote("kafka", 5)}
    readied = Vote("postgres", True, 5, {"gid": "g", "tables": {TABLE: {"rows": 5}}}, "", {TABLE: 5}, "prepared")
    log.record_vote(lid, readied)
    assert log.votes(lid)["postgres"] == readied


def test_a_prepare_error_is_cut_at_4000_characters(log, pipeline):
    lid = begun(log, pipeline)
    log.record_prepare_error(lid, "x" * 5000)
    assert log.get(lid).prepare_error == "x" * 4000


# -- what may change in which state ---------------------------------------------------------


def test_audit_and_approval_are_kept_only_while_the_load_is_prepared(log, pipeline):
    lid = begun(log, pipeline)
    assert not log.record_audit(lid, {"verdict": "pass"}) and not log.record_approval(lid, {"asked_at": "t"})
    log.transition(lid, State.PREPARED)
    assert log.record_audit(lid, {"verdict": "pass"}) and log.record_approval(lid, {"asked_at": "t"})
    log.transition(lid, State.ABORTING)
    assert not log.record_audit(lid, {"verdict": "error"}) and not log.record_approval(lid, {"answer": "late"})
    load = log.get(lid)
    assert (load.audit, load.approval) == ({"verdict": "pass"}, {"asked_at": "t"})


def test_outcomes_are_kept_only_while_committing_and_read_back_newest_first(log, pipeline):
    loads = [begun(log, pipeline, f"run-{i}") for i in range(3)]
    for i, lid in enumerate(loads):
        assert not log.record_outcomes(lid, {"kafka": {"kind": "done", "seconds": 0.5, "count": i}})
        to_state(log, lid, State.PREPARED, State.COMMITTING)
        assert log.record_outcomes(lid, {"kafka": {"kind": "done", "seconds": 0.5, "count": i}})
        log.transition(lid, State.COMMITTED)
        assert not log.record_outcomes(lid, {"kafka": {"kind": "done", "seconds": 9.0, "count": 99}})
    assert [h["count"] for h in log.commit_history(pipeline, "kafka")] == [2, 1, 0]
    assert [h["count"] for h in log.commit_history(pipeline, "kafka", limit=1)] == [2]
    assert log.commit_history(pipeline, "postgres") == []


def test_the_exposure_starts_once(log, pipeline):
    lid = begun(log, pipeline)
    log.mark_exposed(lid)
    first = log.get(lid).exposed_at
    assert first is not None
    log.mark_exposed(lid)
    assert log.get(lid).exposed_at == first


# -- one driver per phase 2 -----------------------------------------------------------------

LEASE = timedelta(minutes=5)
ENDED = timedelta(0)  # a lease that has ended by the next transaction: a driver that died


def decided(log, pipeline: str, to: State = State.COMMITTING, run: str = "run-1") -> str:
    lid = begun(log, pipeline, run)
    to_state(log, lid, State.PREPARED, to)
    return lid


def test_a_load_has_one_driver_while_its_lease_lasts(log, pipeline):
    lid = decided(log, pipeline)
    load = log.claim_driver(lid, "one", LEASE)
    assert load.driver == "one" and load.driver_until is not None
    with pytest.raises(DriverBusy, match=f"load {lid} is being driven by one") as busy:
        log.claim_driver(lid, "two", LEASE)
    assert (busy.value.driver, busy.value.until) == ("one", load.driver_until)
    assert log.claim_driver(lid, "one", LEASE).driver_until >= load.driver_until, "claiming again extends"
    with pytest.raises(LeaseLost):
        log.transition(lid, State.COMMITTED, driver="two")
    assert log.get(lid).state == State.COMMITTING
    load, changed = log.transition(lid, State.COMMITTED, driver="one")
    assert changed and (load.driver, load.driver_until) == (None, None), "a terminal state ends the lease"


def test_an_ended_lease_is_taken_over_and_its_old_driver_changes_nothing(log, pipeline):
    lid = decided(log, pipeline, State.ABORTING)
    log.claim_driver(lid, "dead", ENDED)
    assert log.claim_driver(lid, "heir", LEASE).driver == "heir"
    assert not log.renew_driver(lid, "dead", LEASE)
    with pytest.raises(LeaseLost, match="heir holds it now"):
        log.transition(lid, State.ABORTED, driver="dead")
    log.release_driver(lid, "dead")  # not its lease: nothing changes
    assert log.get(lid).driver == "heir" and log.renew_driver(lid, "heir", LEASE)
    log.release_driver(lid, "heir")
    assert log.get(lid).driver is None
    assert log.claim_driver(lid, "next", LEASE).driver == "next", "a released lease is free at once"


@pytest.mark.parametrize("state", [State.PREPARING, State.PREPARED, State.COMMITTED, State.ABORTED])
def test_only_a_decided_unfinished_load_has_a_driver(log, pipeline, state):
    lid = begun(log, pipeline)
    path = {State.PREPARING: (), State.PREPARED: (State.PREPARED,),
            State.COMMITTED: (State.PREPARED, State.COMMITTING, State.COMMITTED),
            State.ABORTED: (State.ABORTING, State.ABORTED)}[state]
    to_state(log, lid, *path)
    with pytest.raises(StateConflict, match="expected one of: COMMITTING, ABORTING"):
        log.claim_driver(lid, "one", LEASE)
    assert log.get(lid).driver is None


def test_of_many_drivers_claiming_at_once_exactly_one_drives(log, pipeline):
    lid = decided(log, pipeline)
    results, start = {}, threading.Barrier(4)

    def claim(who):
        start.wait()
        try:
            results[who] = log.claim_driver(lid, who, LEASE).driver
        except DriverBusy as exc:
            results[who] = exc

    threads = [threading.Thread(target=claim, args=(f"d{i}",)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    winners = [who for who, r in results.items() if r == who]
    assert len(winners) == 1 and all(isinstance(r, DriverBusy) for w, r in results.items() if w not in winners)
    assert log.get(lid).driver == winners[0]


# -- the quarantine -------------------------------------------------------------------------


def test_the_quarantine_keeps_replaces_and_sweeps_a_loads_lines(log, pipeline):
    lid, other = begun(log, pipeline), begun(log, f"{pipeline}_other")
    lines = [Kept("bad amount", "f.jsonl", f"#{i}", f'{{"line": {i}}}') for i in range(3)] + [
        Kept("not JSON", "f.jsonl", None, "{")]
    assert log.quarantine(lid, lines) == 4
    assert log.quarantine(lid, lines) == 4  # a retried prepare: kept once
    log.quarantine(other, lines[:1])
    kept = log.quarantined(lid)
    assert [(k.reason, k.detail) for k in kept] == [("bad amount", "#0"), ("bad amount", "#1"), ("bad amount", "#2"),
                                                    ("not JSON", None)], "by reason, in the order kept"
    assert all(k.kept_at is not None for k in kept) and log.quarantined(lid, limit=2) == kept[:2]
    rule = [Kept("range rule", TABLE, "error of audit rule range rule", '{"amount": 9}')]
    log.quarantine(lid, rule, reasons=["range rule"])  # the audit: its rules' rows only
    log.quarantine(lid, rule, reasons=["range rule"])
    assert [k.reason for k in log.quarantined(lid)] == ["bad amount"] * 3 + ["not JSON", "range rule"]

    assert log.sweep_quarantine(timedelta(days=7), pipeline) == 0
    assert log.sweep_quarantine(timedelta(0), pipeline) == 5, "only the pipeline's own loads' lines"
    assert log.quarantined(lid) == [] and len(log.quarantined(other)) == 1
    assert log.sweep_quarantine(timedelta(0), f"{pipeline}_other") == 1


def test_a_driver_known_dead_is_taken_over_before_its_lease_ends(log, pipeline):
    lid = decided(log, pipeline)
    log.claim_driver(lid, "killed", LEASE)
    with pytest.raises(DriverBusy):
        log.claim_driver(lid, "heir", LEASE, dead="someone else")
    assert log.claim_driver(lid, "heir", LEASE, dead="killed").driver == "heir"
    with pytest.raises(DriverBusy):
        log.claim_driver(lid, "third", LEASE, dead="killed")
