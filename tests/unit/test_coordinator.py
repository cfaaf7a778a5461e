"""The coordinator over every branch, without servers: an in-memory log and in-memory
participants with fault knobs (twophase.log.MemoryLog, twophase.participants.memory).

Every step gets fresh participant instances over one shared store (the contract: any hook
may run on a fresh instance, in another process, later). A load here has two participants:
"tables" (two targets, a commit that cannot fail after a yes vote, like Postgres) and
"topic" (one target, commit_may_fail, like a Kafka copy), so "topic" commits first.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from twophase import failpoints
from twophase.gates import approval, audit_step
from twophase.gates.approval import ApprovalGate
from twophase.gates.audit_step import AuditGate
from twophase.ids import load_id_for
from twophase.log import MemoryLog, StateConflict, Superseded
from twophase.ops import recovery
from twophase.participants import with_last_resource
from twophase.participants.kafka import KafkaTarget
from twophase.participants.memory import (Crashed, Faults, LocalFrame, LocalStage, MemoryParticipant, MemoryStore, MemoryUnreachable)
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.coordinator import AlreadyCommitted, IntervalBusy, LoadAborted, ProtocolViolation, RetryLater
from twophase.protocol.outcome import Kind
from twophase.protocol.states import TERMINAL, State
from twophase.protocol.voting import MinRows
from twophase.spec import LoadSpec, SpecError

ORDERS, DAILY, TOPIC = "shop.orders", "shop.daily", "orders"
ROWS = [{"customer_id": f"c{i % 7}", "amount": i} for i in range(20)]
N = len(ROWS)
METRICS = {"input_lines": N, "rejected_lines": 0}  # the job's figures: every line loaded
# name -> (targets, commit_may_fail[, why it cannot prepare]), in the order the load describes them
LAYOUT = {"tables": ((ORDERS, DAILY), False), "topic": ((TOPIC,), True)}


class Conns:
    """What the coordinator calls `conns`: fresh MemoryParticipants over one store on every call."""

    def __init__(self, store: MemoryStore, layout=None, **faults: Faults):
        self.store, self.layout, self.faults = store, layout or LAYOUT, faults
        self.built = 0

    def participants(self, spec: LoadSpec, attempt: int = 1) -> list[MemoryParticipant]:
        self.built += 1
        return with_last_resource(spec, [
            MemoryParticipant(self.store, spec.load_id, targets, name, may_fail, self.faults.get(name),
                              attempt=attempt, commits_last=last[0] if last else "")
            for name, (targets, may_fail, *last) in self.layout.items()])

    def healed(self) -> "Conns":
        """The same servers with every fault gone (a fresh process after a crash)."""
        return Conns(self.store, self.layout)

    def sweep(self, state_of, pipeline=None):
        """Recovery's orphan sweep of these servers (Connections.sweep)."""
        return MemoryParticipant.sweep(self.store.endpoint, state_of, pipeline)


def make_spec(run_id="run-1", mode="append", interval=None) -> LoadSpec:
    return LoadSpec(load_id=load_id_for("unit", run_id), pipeline="unit", run_id=run_id,
                    targets=(PostgresTarget(ORDERS, mode, {"day": "2026-11-20"} if mode == "replace" else {}),
                             KafkaTarget(TOPIC, key_column="customer_id")), data_interval=interval)


def frame() -> LocalFrame:
    return LocalFrame.of_rows(ROWS, partitions=3, batch_rows=3)


def visible(conns: Conns, load_id: str) -> dict[str, int]:
    """Every target's rows of the load that readers see."""
    seen = {}
    for p in conns.healed().participants(make_spec()):
        seen.update(p.visible([load_id])[load_id])
    return seen


ALL = {ORDERS: N, DAILY: N, TOPIC: N}
NOTHING = {ORDERS: 0, DAILY: 0, TOPIC: 0}


def prepare_and_vote(log, conns, spec, stage=None, rules=()):
    """begin, prepare (a failed prepare is left to the vote, as the DAG does), vote."""
    coordinator.begin(log, spec)
    try:
        coordinator.prepare(log, conns, spec.load_id, frame(), METRICS, stage=stage or LocalStage())
    except Exception:  # noqa: BLE001 - the prepare task failed; the vote decides ABORT
        pass
    return coordinator.vote(log, conns, spec.load_id, rules)


def run_load(log, conns, spec, stage=None):
    """The whole load as the DAG's tasks run it: ... then commit or rollback."""
    decided = prepare_and_vote(log, conns, spec, stage)
    if decided.state == State.COMMITTING:
        return coordinator.commit(log, conns, spec.load_id)
    return coordinator.rollback(log, conns, spec.load_id)


def recover(log, conns) -> list[str]:
    """The real recovery.recover with deadline 0 (presume abort at once): the loads it acted
    on (resolved, or whose orphans it swept)."""
    return [a.load_id for a in recovery.recover(log, conns, deadline=timedelta(0))]


def assert_nothing_left(store: MemoryStore, load_id: str):
    assert store.staged_rows(load_id) == 0, "staging leaked"
    assert not [k for k in store.prepared if k[1] == load_id], "prepared data leaked"


@pytest.fixture
def log():
    return MemoryLog()


@pytest.fixture
def store():
    return MemoryStore()


# -- the happy path -----------------------------------------------------------------------------


def test_a_load_every_participant_votes_yes_for_commits_and_becomes_visible_only_at_commit(log, store):
    conns, spec = Conns(store), make_spec()
    decided = prepare_and_vote(log, conns, spec)
    assert decided.state == State.COMMITTING and decided.decision == "COMMIT"
    assert visible(conns, spec.load_id) == NOTHING, "visible before commit"

    outcomes = coordinator.commit(log, conns, spec.load_id)

    assert [(o.participant, o.kind) for o in outcomes] == [("topic", Kind.DONE), ("tables", Kind.DONE)]
    load = log.get(spec.load_id)
    assert load.state == State.COMMITTED and load.expected == ALL
    assert load.prepared_at <= load.exposed_at <= load.decided_at <= load.finished_at, "exposure starts in the vote"
    assert visible(conns, spec.load_id) == ALL
    assert [t.to_state for t in log.history(spec.load_id)] == ["PREPARING", "PREPARED", "COMMITTING", "COMMITTED"]
    assert {n: v.counts for n, v in log.votes(spec.load_id).items()} == {
        "tables": {ORDERS: N, DAILY: N}, "topic": {TOPIC: N}}
    assert_nothing_left(store, spec.load_id)
    assert coordinator.commit(log, conns, spec.load_id) == [], "a repeated commit step does nothing"


def test_every_step_builds_fresh_participants_once(log, store):
    conns, spec = Conns(store), make_spec()
    run_load(log, conns, spec)
    assert conns.built == 3  # prepare, vote, commit: each built its own, once
    assert log.get(spec.load_id).state == State.COMMITTED


# -- decided ABORT --------------------------------------------------------------------------------


@pytest.mark.parametrize("voter", ["tables", "topic"])
def test_a_no_vote_aborts_the_load_and_nothing_is_visible(log, store, voter):
    conns, spec = Conns(store, **{voter: Faults(vote_no=True)}), make_spec()
    outcomes = run_load(log, conns, spec)
    load = log.get(spec.load_id)
    assert load.state == State.ABORTED and load.decision == "ABORT"
    assert f"{voter} voted no" in load.reason
    assert {o.kind for o in outcomes} == {Kind.DONE}
    assert visible(conns, spec.load_id) == NOTHING
    assert_nothing_left(store, spec.load_id)


def test_a_quality_rule_that_fails_aborts_the_load(log, store):
    conns, spec = Conns(store), make_spec()
    decided = prepare_and_vote(log, conns, spec, rules=[MinRows(N + 1)])
    assert decided.state == State.ABORTING and "quality gate" in decided.reason
    assert decided.exposed_at is None, "a load refused by its rules was never made ready, so never exposed"


# ready fault -> what the abort reason says
CHECK_FAILURES = {
    "ready finds the vote no longer holds": ({"topic": Faults(fail_at={"ready": "fail"})}, "fault knob ready=fail"),
    "ready raises unexpectedly": ({"tables": Faults(fail_at={"ready": "raise"})},
                                         "tables could not be made ready: MemoryFault"),
    "prepared data lost before the decision": ({}, "the prepared data of tables for load"),
}


@pytest.mark.parametrize("case", list(CHECK_FAILURES))
def test_a_participant_that_cannot_be_made_ready_aborts_the_load(log, store, case):
    faults, says = CHECK_FAILURES[case]
    conns, spec = Conns(store, **faults), make_spec()
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage())
    if not faults:
        assert store.lose("tables", spec.load_id)
    decided = coordinator.vote(log, conns, spec.load_id)
    assert decided.state == State.ABORTING and says in decided.reason
    coordinator.rollback(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.ABORTED
    assert visible(conns, spec.load_id) == NOTHING
    assert_nothing_left(store, spec.load_id)


def test_ready_that_cannot_reach_its_server_leaves_the_decision_to_a_retry(log, store):
    conns, spec = Conns(store, topic=Faults(fail_at={"ready": "down"}, times=1)), make_spec()
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage())
    with pytest.raises(RetryLater, match="unreachable"):
        coordinator.vote(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.PREPARED
    assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING


# where prepare fails -> what the vote's reason quotes
PREPARE_FAILURES = {
    "stage raises": (Faults(fail_at={"stage": "raise"}), "prepare failed: MemoryFault: stage of tables"),
    "a writer raises every attempt": (Faults(fail_at={"write": "raise"}), "prepare failed: MemoryFault: write of tables"),
    "prepare raises": (Faults(fail_at={"prepare": "raise"}), "prepare failed: MemoryFault: prepare of tables"),
    "the frame lacks a column": (None, "prepare failed: SpecError: the DataFrame lacks columns tables needs: ['day']"),
}


@pytest.mark.parametrize("case", list(PREPARE_FAILURES))
def test_a_failed_prepare_aborts_the_load_quoting_its_root_cause(log, store, case):
    faults, reason = PREPARE_FAILURES[case]
    conns, spec = Conns(store, tables=faults), make_spec()
    if faults is None:
        conns.participants = lambda s, attempt=1: [MemoryParticipant(store, s.load_id, (ORDERS,), "tables",
                                                          columns=["customer_id", "day"])]
    coordinator.begin(log, spec)
    with pytest.raises(Exception):
        coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage())
    assert log.get(spec.load_id).prepare_error
    decided = coordinator.vote(log, conns, spec.load_id)
    assert decided.state == State.ABORTING and decided.reason.startswith(reason), decided.reason
    coordinator.rollback(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.ABORTED
    assert_nothing_left(store, spec.load_id)


def test_metrics_that_break_their_contract_fail_the_prepare_before_anything_is_staged(log, store):
    """A misspelt figure would be read as missing (here the rejected share's gate could not
    check it): the prepare fails naming it, and the vote quotes it."""
    conns, spec = Conns(store), make_spec()
    coordinator.begin(log, spec)
    with pytest.raises(SpecError, match=r"metric 'rejected_line' is not one the product reads; did you mean "
                                        r"'rejected_lines'\?; metric 'rejected_lines' is missing"):
        coordinator.prepare(log, conns, spec.load_id, frame(), {"input_lines": N, "rejected_line": 2},
                            stage=LocalStage())
    assert [e for e in store.events if e[2] == spec.load_id] == [], "no participant was called"
    decided = coordinator.vote(log, conns, spec.load_id)
    assert decided.state == State.ABORTING
    breach = "prepare failed: SpecError: the job's metrics break their contract"
    assert decided.reason.startswith(breach), decided.reason
    coordinator.rollback(log, conns, spec.load_id)
    assert_nothing_left(store, spec.load_id)


def test_a_load_whose_prepare_never_ran_is_aborted_by_the_vote(log, store):
    conns, spec = Conns(store), make_spec()
    coordinator.begin(log, spec)
    decided = coordinator.vote(log, conns, spec.load_id)
    assert decided.state == State.ABORTING and "prepare did not finish" in decided.reason


# -- phase 2: retry later ----------------------------------------------------------------------


@pytest.mark.parametrize("who", ["topic", "tables"])
@pytest.mark.parametrize("how", ["retry", "down"])
def test_retry_later_at_commit_keeps_the_load_committing_and_a_retry_commits_it(log, store, who, how):
    conns, spec = Conns(store, **{who: Faults(fail_at={"commit": how}, times=1)}), make_spec()
    assert prepare_and_vote(log, conns, spec).state == State.COMMITTING

    with pytest.raises(RetryLater, match=f"{who}: retry later"):
        coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.COMMITTING

    outcomes = {o.participant: o.kind for o in coordinator.commit(log, conns, spec.load_id)}
    assert log.get(spec.load_id).state == State.COMMITTED
    assert outcomes == ({"topic": Kind.DONE, "tables": Kind.DONE} if who == "topic"
                        else {"topic": Kind.ALREADY_DONE, "tables": Kind.DONE})
    assert visible(conns, spec.load_id) == ALL


@pytest.mark.parametrize("how", ["raise", "raise_after"])
def test_an_unexpected_exception_inside_commit_becomes_retry_later_never_raw(log, store, how):
    conns, spec = Conns(store, tables=Faults(fail_at={"commit": how}, times=1)), make_spec()
    prepare_and_vote(log, conns, spec)

    with pytest.raises(RetryLater, match="commit raised unexpectedly, outcome unknown until retried: MemoryFault"):
        coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.COMMITTING

    outcomes = {o.participant: o.kind for o in coordinator.commit(log, conns, spec.load_id)}
    # "raise_after" committed before raising: the retry learns it was done
    assert outcomes["tables"] == (Kind.ALREADY_DONE if how == "raise_after" else Kind.DONE)
    assert log.get(spec.load_id).state == State.COMMITTED
    assert visible(conns, spec.load_id) == ALL


@pytest.mark.parametrize("who", ["topic", "tables"])
@pytest.mark.parametrize("how", ["retry", "down", "raise"])
def test_retry_later_at_abort_keeps_the_load_aborting_and_a_retry_aborts_it(log, store, who, how):
    faults = {"tables": Faults(vote_no=True)}
    faults[who] = replace(faults.get(who, Faults()), fail_at={"abort": how}, times=1)
    conns, spec = Conns(store, **faults), make_spec()
    assert prepare_and_vote(log, conns, spec).state == State.ABORTING

    with pytest.raises(RetryLater, match=f"{who}: retry later"):
        coordinator.rollback(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.ABORTING

    coordinator.rollback(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.ABORTED
    assert visible(conns, spec.load_id) == NOTHING
    assert_nothing_left(store, spec.load_id)


# -- phase 2: failing for good ---------------------------------------------------------------


@pytest.mark.parametrize("fault", [Faults(fail_at={"commit": "fail"}), Faults(lose_prepared=True)],
                         ids=["its commit fails", "its prepared data is lost"])
def test_the_first_committing_participant_failing_for_good_rolls_the_whole_load_back(log, store, fault):
    conns, spec = Conns(store, topic=fault), make_spec()
    prepare_and_vote(log, conns, spec)

    with pytest.raises(LoadAborted, match="topic failed for good before any participant committed") as err:
        coordinator.commit(log, conns, spec.load_id)

    load = log.get(spec.load_id)
    assert load.state == State.ABORTED and load.decision == "ABORT"
    assert "rolled back" in load.reason and "tables: done" in str(err.value)
    assert [t.to_state for t in log.history(spec.load_id)][-3:] == ["COMMITTING", "ABORTING", "ABORTED"]
    assert store.order("commit", spec.load_id) == []
    assert visible(conns, spec.load_id) == NOTHING
    assert_nothing_left(store, spec.load_id)


@pytest.mark.parametrize("how", ["lose_prepared knob", "an operator drops it after the decision"])
def test_a_prepared_participant_lost_after_another_committed_violates_the_load_loudly(log, store, how):
    faults = {"tables": Faults(lose_prepared=True)} if how == "lose_prepared knob" else {}
    conns, spec = Conns(store, **faults), make_spec()
    assert prepare_and_vote(log, conns, spec).state == State.COMMITTING
    if not faults:
        store.lose("tables", spec.load_id)

    with pytest.raises(ProtocolViolation, match=f"load {spec.load_id} VIOLATED") as err:
        coordinator.commit(log, conns, spec.load_id)

    load = log.get(spec.load_id)
    assert load.state == State.VIOLATED
    assert load.reason.startswith(f"topic committed {N} but tables cannot commit: the prepared data of tables")
    assert load.reason in str(err.value)
    assert visible(conns, spec.load_id) == {ORDERS: 0, DAILY: 0, TOPIC: N}
    with pytest.raises(StateConflict):
        coordinator.commit(log, conns, spec.load_id)  # terminal: never left


def test_a_rollback_that_cannot_complete_violates_the_load(log, store):
    conns, spec = Conns(store, tables=Faults(vote_no=True), topic=Faults(fail_at={"abort": "fail"})), make_spec()
    prepare_and_vote(log, conns, spec)

    with pytest.raises(ProtocolViolation, match="rollback impossible: topic: failed"):
        coordinator.rollback(log, conns, spec.load_id)

    load = log.get(spec.load_id)
    assert load.state == State.VIOLATED and load.reason.startswith("rollback impossible: topic: failed")


def test_a_rollback_after_a_failed_first_commit_that_cannot_complete_violates_the_load(log, store):
    conns = Conns(store, topic=Faults(fail_at={"commit": "fail"}), tables=Faults(fail_at={"abort": "fail"}))
    spec = make_spec()
    prepare_and_vote(log, conns, spec)
    with pytest.raises(ProtocolViolation, match="rollback impossible: tables: failed"):
        coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.VIOLATED


def test_a_retried_commit_resumes_a_rollback_that_said_retry_later(log, store):
    conns = Conns(store, topic=Faults(fail_at={"commit": "fail"}), tables=Faults(fail_at={"abort": "retry"}, times=1))
    spec = make_spec()
    prepare_and_vote(log, conns, spec)
    with pytest.raises(RetryLater):
        coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.ABORTING

    with pytest.raises(LoadAborted):
        coordinator.commit(log, conns, spec.load_id)  # the retry the RetryLater asked for
    assert log.get(spec.load_id).state == State.ABORTED


# -- commit order -------------------------------------------------------------------------------


def test_participants_whose_commit_may_fail_commit_first_and_roll_back_first(log, store):
    layout = {"a_table": ((ORDERS,), False), "m_topic": ((TOPIC,), True), "z_table": ((DAILY,), False)}
    conns, spec = Conns(store, layout), make_spec()
    run_load(log, conns, spec)
    assert store.order("commit", spec.load_id) == ["m_topic", "a_table", "z_table"]

    conns, spec = Conns(store, layout, z_table=Faults(vote_no=True)), make_spec("run-2")
    run_load(log, conns, spec)
    assert store.order("abort", spec.load_id) == ["m_topic", "a_table", "z_table"]


def test_a_second_may_fail_participant_failing_after_the_first_committed_violates_the_load(log, store):
    layout = {"tables": ((ORDERS,), False), "feed_a": ((TOPIC,), True), "feed_b": (("audit",), True)}
    conns, spec = Conns(store, layout, feed_b=Faults(fail_at={"commit": "fail"})), make_spec()
    prepare_and_vote(log, conns, spec)

    with pytest.raises(ProtocolViolation, match=f"feed_a committed {N} but feed_b cannot commit"):
        coordinator.commit(log, conns, spec.load_id)

    assert log.get(spec.load_id).state == State.VIOLATED
    assert store.order("commit", spec.load_id) == ["feed_a"]


def test_clean_up_that_leaves_staging_is_reported_and_swept_by_recovery(log, store):
    conns, spec = Conns(store, tables=Faults(fail_at={"clean_up": "fail"})), make_spec()
    outcomes = {o.participant: o for o in run_load(log, conns, spec)}
    assert "fault knob clean_up=fail" in outcomes["tables"].counts["staging"]
    assert log.get(spec.load_id).state == State.COMMITTED
    assert store.staged_rows(spec.load_id) == 2 * N
    assert spec.load_id in recover(log, conns.healed())
    assert_nothing_left(store, spec.load_id)


# -- the staging pass: retried attempts ---------------------------------------------------------


@pytest.mark.parametrize("stage", [
    LocalStage(crash_midway=frozenset({1})),
    LocalStage(crash_staged=frozenset({0, 2})),
    LocalStage(crash_midway=frozenset({0}), crash_staged=frozenset({1})),
], ids=["midway", "after staging everything", "both"])
def test_a_retried_partition_attempt_leaves_no_duplicate(log, store, stage):
    conns, spec = Conns(store), make_spec()
    run_load(log, conns, spec, stage=stage)
    assert [a for a in stage.attempts if a[2] != "ok"], "no attempt was retried"
    assert log.get(spec.load_id).state == State.COMMITTED
    assert visible(conns, spec.load_id) == ALL
    rows = store.committed[("tables", spec.load_id)][ORDERS]
    assert sorted(r["amount"] for r in rows) == list(range(N))


def test_a_writer_failing_once_is_retried_like_a_spark_task(log, store):
    conns, spec = Conns(store, topic=Faults(fail_at={"write": "raise"}, times=1)), make_spec()
    stage = LocalStage()
    run_load(log, conns, spec, stage=stage)
    assert log.get(spec.load_id).state == State.COMMITTED and visible(conns, spec.load_id) == ALL
    assert sum(a[2] != "ok" for a in stage.attempts) == 1


# -- prepare attempts: a zombie never counts -------------------------------------------------------
# Airflow retries the prepare task while the first attempt's Spark application still runs (its
# submitting process died): two attempts of one load at once. The second one's rows differ here,
# so what readers see tells which attempt committed.

RETRY_ROWS = [{"customer_id": f"r{i % 3}", "amount": 1000 + i} for i in range(11)]


def retry_frame() -> LocalFrame:
    return LocalFrame.of_rows(RETRY_ROWS, partitions=2, batch_rows=4)


class FencedLog:
    """The log as one attempt sees it: `before(method)` runs just before that method's first call."""

    def __init__(self, log, method: str, before):
        self._log, self._method, self._before = log, method, before

    def __getattr__(self, name):
        real = getattr(self._log, name)
        if name != self._method or self._before is None:
            return real

        def call(*args, **kwargs):
            before, self._before = self._before, None
            before()
            return real(*args, **kwargs)
        return call


class StageThen:
    """A staging pass after which `then()` runs (another attempt, recovery...)."""

    def __init__(self, then):
        self.then = then

    def __call__(self, frames, stagings):
        staged = LocalStage()(frames, stagings)
        self.then()
        return staged


def second_attempt(log, conns, spec):
    return lambda: coordinator.prepare(log, conns, spec.load_id, retry_frame(), stage=LocalStage())


@pytest.mark.parametrize("when", ["during its staging pass", "after it prepared, before its votes are logged",
                                  "after its votes, before PREPARED"])
def test_a_superseded_prepare_attempt_never_counts_and_discards_what_it_prepared(log, store, when):
    conns, spec = Conns(store), make_spec()
    coordinator.begin(log, spec)
    retry = second_attempt(log, conns, spec)
    first_log, stage = log, LocalStage()
    if when == "during its staging pass":
        stage = StageThen(retry)
    elif when.startswith("after it prepared"):
        first_log = FencedLog(log, "record_vote", retry)
    else:
        first_log = FencedLog(log, "transition", retry)
    with pytest.raises(Superseded, match="prepare attempt 1 of load .* was superseded by attempt 2"):
        coordinator.prepare(first_log, conns, spec.load_id, frame(), stage=stage)
    load = log.get(spec.load_id)
    assert (load.state, load.prepare_attempt, load.prepare_error) == (State.PREPARED, 2, None)
    assert {v.count for v in log.votes(spec.load_id).values()} == {len(RETRY_ROWS), 2 * len(RETRY_ROWS)}
    assert not [k for k in store.prepared if k[2] == 1], "the superseded attempt's prepared data is left"
    assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(log, conns, spec.load_id)
    assert visible(conns, spec.load_id) == {ORDERS: 11, DAILY: 11, TOPIC: 11}
    assert sorted(r["amount"] for r in store.committed[("tables", spec.load_id)][ORDERS]) == list(range(1000, 1011))
    assert_nothing_left(store, spec.load_id)


def test_a_prepare_attempt_finding_its_load_decided_meanwhile_discards_what_it_prepared(log, store):
    conns, spec = Conns(store), make_spec()
    coordinator.begin(log, spec)
    presume_abort = lambda: coordinator.rollback(log, conns, spec.load_id, reason="presumed abort (test)")  # noqa: E731
    with pytest.raises(StateConflict, match="is ABORT"):
        coordinator.prepare(FencedLog(log, "record_vote", presume_abort), conns, spec.load_id, frame(),
                            stage=LocalStage())
    assert log.get(spec.load_id).state == State.ABORTED
    assert not [k for k in store.prepared if k[1] == spec.load_id]
    assert visible(conns, spec.load_id) == NOTHING


def test_a_superseded_attempt_failing_later_does_not_overwrite_the_latest_attempts_error(log, store):
    spec = make_spec()
    coordinator.begin(log, spec)
    first, second = log.claim_prepare(spec.load_id), log.claim_prepare(spec.load_id)
    assert (first, second) == (1, 2)
    log.record_prepare_error(spec.load_id, "the zombie's error", attempt=1)
    assert log.get(spec.load_id).prepare_error is None
    log.record_prepare_error(spec.load_id, "the latest attempt's error", attempt=2)
    assert log.get(spec.load_id).prepare_error == "the latest attempt's error"
    log.claim_prepare(spec.load_id)
    assert log.get(spec.load_id).prepare_error is None, "a new attempt starts without the last one's error"


def test_no_attempt_can_be_claimed_once_the_load_is_prepared_or_decided(log, store):
    conns, spec = Conns(store), make_spec()
    prepare_and_vote(log, conns, spec)
    with pytest.raises(StateConflict, match="is COMMITTING"):
        log.claim_prepare(spec.load_id)
    with pytest.raises(StateConflict, match="is COMMITTING"):
        coordinator.prepare(log, conns, spec.load_id, retry_frame(), stage=LocalStage())
    assert log.get(spec.load_id).prepare_attempt == 1
    coordinator.commit(log, conns, spec.load_id)
    assert visible(conns, spec.load_id) == ALL


# -- begin ----------------------------------------------------------------------------------------

DAY = ("2026-11-20T00:00:00+00:00", "2026-11-21T00:00:00+00:00")


def test_begin_is_idempotent(log):
    spec = make_spec()
    first, again = coordinator.begin(log, spec), coordinator.begin(log, spec)
    assert first == again and first.state == State.PREPARING
    assert len(log.history(spec.load_id)) == 1


def test_begin_refuses_an_interval_another_load_is_still_loading(log):
    coordinator.begin(log, make_spec("run-1", interval=DAY))
    with pytest.raises(IntervalBusy, match="is PREPARING"):
        coordinator.begin(log, make_spec("run-2", interval=DAY))


def test_begin_in_append_mode_refuses_an_interval_already_committed(log, store):
    first = make_spec("run-1", interval=DAY)
    run_load(log, Conns(store), first)
    with pytest.raises(AlreadyCommitted, match=first.load_id):
        coordinator.begin(log, make_spec("run-2", interval=DAY))


def test_begin_in_replace_mode_names_the_committed_loads_it_replaces(log, store):
    first = make_spec("run-1", interval=DAY)
    run_load(log, Conns(store), first)
    load = coordinator.begin(log, make_spec("run-2", mode="replace", interval=DAY))
    assert load.spec().replaces == (first.load_id,)
    assert load.data_interval_start.isoformat() == DAY[0]


# -- races with recovery ---------------------------------------------------------------------------


def test_a_prepare_that_recovery_aborted_meanwhile_discards_what_it_prepared(log, store):
    conns, spec = Conns(store), make_spec()
    coordinator.begin(log, spec)
    local = LocalStage()

    def stage_while_recovery_aborts(df, stagings):
        staged = local(df, stagings)
        coordinator.rollback(log, conns.healed(), spec.load_id, reason="presumed abort (recovery)")
        return staged

    with pytest.raises(StateConflict, match="is ABORTED"):
        coordinator.prepare(log, conns, spec.load_id, frame(), stage=stage_while_recovery_aborts)
    assert log.get(spec.load_id).state == State.ABORTED
    assert visible(conns, spec.load_id) == NOTHING
    assert_nothing_left(store, spec.load_id)


class _VoteDecidesFirst(MemoryLog):
    """A log where, right before the first ABORTING transition, another actor's vote logs
    COMMIT: the race of a presumed abort (or a second vote) with the load's own vote."""

    def __init__(self):
        super().__init__()
        self.raced = False

    def transition(self, load_id, to, **kwargs):
        if to == State.ABORTING and not self.raced:
            self.raced = True
            super().transition(load_id, State.COMMITTING, expect=[State.PREPARED])
        return super().transition(load_id, to, **kwargs)


def test_a_presumed_abort_racing_the_vote_never_overwrites_its_commit_decision(store):
    log, conns, spec = _VoteDecidesFirst(), Conns(store), make_spec()
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, frame(), METRICS, stage=LocalStage())
    with pytest.raises(StateConflict, match="is COMMITTING"):
        coordinator.rollback(log, conns, spec.load_id, reason="presumed abort (recovery)")
    assert log.get(spec.load_id).state == State.COMMITTING and log.get(spec.load_id).decision == "COMMIT"
    coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.COMMITTED


def test_a_vote_for_abort_racing_a_vote_for_commit_keeps_the_first_decision(store):
    log, conns, spec = _VoteDecidesFirst(), Conns(store), make_spec()
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, frame(), METRICS, stage=LocalStage())
    decided = coordinator.vote(log, conns, spec.load_id, rules=[MinRows(N + 1)])
    assert decided.state == State.COMMITTING and decided.decision == "COMMIT"


# -- a crash between any two hooks, then recovery ------------------------------------------------

# where the process dies -> (the load's state left in the log, its state after recovery).
# "<participant>.<hook>": killed as the hook starts; "<participant>.<hook> done": killed right
# after its effect; "coordinator.*", "rollback.middle": the coordinator's failpoints.
# Loads marked ABORT have "tables" voting no, so they roll back.
CASES = {
    "tables.stage": (State.PREPARING, State.ABORTED),
    "tables.stage done": (State.PREPARING, State.ABORTED),
    "topic.stage": (State.PREPARING, State.ABORTED),
    "topic.stage done": (State.PREPARING, State.ABORTED),
    "tables.write": (State.PREPARING, State.ABORTED),
    "topic.close done": (State.PREPARING, State.ABORTED),
    "tables.prepare": (State.PREPARING, State.ABORTED),
    "tables.prepare done": (State.PREPARING, State.ABORTED),
    "topic.prepare": (State.PREPARING, State.ABORTED),
    "topic.prepare done": (State.PREPARING, State.ABORTED),
    "coordinator.votes_logged": (State.PREPARING, State.ABORTED),
    "tables.ready": (State.PREPARED, State.ABORTED),
    "topic.ready": (State.PREPARED, State.ABORTED),
    "coordinator.readied": (State.PREPARED, State.ABORTED),
    "coordinator.decision_logged": (State.COMMITTING, State.COMMITTED),
    "topic.commit": (State.COMMITTING, State.COMMITTED),
    "topic.commit done": (State.COMMITTING, State.COMMITTED),
    "tables.commit": (State.COMMITTING, State.COMMITTED),
    "tables.commit done": (State.COMMITTING, State.COMMITTED),
    "coordinator.committed_logged": (State.COMMITTED, State.COMMITTED),
    "topic.clean_up": (State.COMMITTED, State.COMMITTED),
    "tables.clean_up done": (State.COMMITTED, State.COMMITTED),
    "ABORT topic.abort": (State.ABORTING, State.ABORTED),
    "ABORT topic.abort done": (State.ABORTING, State.ABORTED),
    "ABORT rollback.middle": (State.ABORTING, State.ABORTED),
    "ABORT tables.abort": (State.ABORTING, State.ABORTED),
    "ABORT tables.abort done": (State.ABORTING, State.ABORTED),
}


def crash_at(point: str, monkeypatch) -> dict[str, Faults]:
    """The faults (and failpoint) that kill the process at `point` of CASES: "tables"
    votes no when it starts with "ABORT "."""
    where = point.removeprefix("ABORT ")
    faults: dict[str, Faults] = {"tables": Faults(vote_no=True)} if point.startswith("ABORT ") else {}
    if where.startswith(("coordinator.", "rollback.")):
        hit = failpoints.hit

        def killed_at(name):
            hit(name)
            if name == where:
                raise Crashed(f"killed at {name}")
        monkeypatch.setattr(failpoints, "hit", killed_at)
    else:
        who, hook = where.split(".")
        hook, how = (hook.removesuffix(" done"), "crash_after") if hook.endswith(" done") else (hook, "crash")
        faults[who] = replace(faults.get(who, Faults()), fail_at={hook: how}, times=1)
    return faults


@pytest.mark.parametrize("point", list(CASES))
def test_a_crash_between_any_two_hooks_is_finished_by_recovery(log, store, point, monkeypatch):
    in_doubt, final = CASES[point]
    conns, spec = Conns(store, **crash_at(point, monkeypatch)), make_spec()

    with pytest.raises(Crashed):
        run_load(log, conns, spec)
    monkeypatch.undo()
    assert log.get(spec.load_id).state == in_doubt

    healed = conns.healed()  # a new process: fresh instances, same log and servers
    recover(log, healed)

    load = log.get(spec.load_id)
    assert load.state == final, load.reason
    assert visible(healed, spec.load_id) == (ALL if final == State.COMMITTED else NOTHING)
    assert_nothing_left(store, spec.load_id)
    assert recover(log, healed) == [] and log.get(spec.load_id).state == final, "recovery is not idempotent"
    assert final in TERMINAL


def test_the_likeliest_to_fail_commits_first_then_the_other_may_fail_ones_then_the_rest():
    """commit_order: may-fail participants by commit_risk (highest first), then by name;
    the ones whose commit cannot fail last. The real kinds: Kafka (2), Iceberg (1), Postgres."""
    from twophase.participants import commit_order
    from twophase.participants.iceberg import IcebergParticipant
    from twophase.participants.kafka import KafkaParticipant
    from twophase.participants.postgres import PostgresParticipant

    def made(cls, name):
        p = object.__new__(cls)  # the order reads class attributes and the name only
        p.name = name
        return p

    parts = [made(PostgresParticipant, "postgres"), made(IcebergParticipant, "iceberg:b.t"),
             made(PostgresParticipant, "postgres@reporting"), made(IcebergParticipant, "iceberg:a.t"),
             made(KafkaParticipant, "kafka@eu"), made(KafkaParticipant, "kafka")]
    assert [p.name for p in commit_order(parts)] == ["kafka", "kafka@eu", "iceberg:a.t", "iceberg:b.t", "postgres",
                                                     "postgres@reporting"]


# -- the audit step --------------------------------------------------------------------------


def _prepared(log, conns, spec):
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, frame(), {"input_lines": N, "rejected_lines": 1}, stage=LocalStage())


def test_the_audit_measures_staged_rows_and_its_error_aborts_the_load(log, store):
    from twophase.audit import DuplicateKeys, RowCount

    conns, spec = Conns(store), make_spec()
    _prepared(log, conns, spec)
    report = audit_step.audit(log, conns, spec.load_id, [RowCount(ORDERS, warn=(N + 1, None)),
                                                          DuplicateKeys(ORDERS, ("customer_id",), error=(0, 0))])
    assert [(r.rule, r.value, r.verdict) for r in report.results] == [
        (f"row_count({ORDERS})", N, "warn"), (f"duplicate_keys({ORDERS}: customer_id)", N - 7, "error")]
    assert log.get(spec.load_id).audit == report.to_json()
    assert visible(conns, spec.load_id) == NOTHING and store.is_prepared("tables", spec.load_id)

    decided = coordinator.vote(log, conns, spec.load_id, gates=[AuditGate(required=True)])
    assert decided.state == State.ABORTING and "audit: duplicate_keys(shop.orders: customer_id) is 13" in decided.reason
    assert decided.exposed_at is None, "an audit error aborts before anything is made ready"
    assert audit_step.audit(log, conns, spec.load_id, []) is None, "a decided load is not audited again"


def test_rows_failing_a_rule_are_kept_in_the_quarantine_capped_and_replaced_by_a_retried_audit(log, store):
    import json

    from twophase.audit import DuplicateKeys, NullShare, ValueRange

    conns, spec = Conns(store), make_spec()
    _prepared(log, conns, spec)
    duplicates = DuplicateKeys(ORDERS, ("customer_id",), error=(0, 0))
    passing = NullShare(ORDERS, "customer_id", error=(0, 0))
    warned = ValueRange(ORDERS, "amount", low=0, high=15, warn=(0, 0))
    audit_step.audit(log, conns, spec.load_id, [duplicates, passing, warned], quarantine_cap=5)
    kept = log.quarantined(spec.load_id)
    assert [(k.reason, k.source) for k in kept] == [(duplicates.name, ORDERS)] * 5 + [(warned.name, ORDERS)] * 4
    assert sorted(json.loads(k.content)["amount"] for k in kept if k.reason == warned.name) == [16, 17, 18, 19]
    assert all(json.loads(k.content)["customer_id"] in {f"c{i}" for i in range(7)} for k in kept)
    assert kept[0].detail == f"error of audit rule {duplicates.name}"

    audit_step.audit(log, conns, spec.load_id, [duplicates, passing, warned], quarantine_cap=100)  # retried
    assert sorted(k.reason for k in log.quarantined(spec.load_id)) == [duplicates.name] * (N - 7) + [warned.name] * 4


def test_a_load_without_its_required_audit_aborts_and_a_passing_one_commits(log, store):
    conns = Conns(store)
    missing, passing = make_spec("no-audit"), make_spec("audited")
    _prepared(log, conns, missing)
    decided = coordinator.vote(log, conns, missing.load_id, gates=[AuditGate(required=True)])
    assert decided.state == State.ABORTING and "the audit did not run" in decided.reason

    _prepared(log, conns, passing)
    assert audit_step.audit(log, conns, passing.load_id, []).verdict == "pass"
    assert coordinator.vote(log, conns, passing.load_id, gates=[AuditGate(required=True)]).state == State.COMMITTING


# -- a person's approval ----------------------------------------------------------------------


@pytest.mark.parametrize("answer, committed, reason", [
    (dict(approved=True, by="alice"), True, None),
    (dict(approved=False, by="bob"), False, "rejected by bob at "),
    (dict(approved=False, timed_out=True), False, "rejected: nobody answered the approval asked at "),
    (None, False, "waiting for approval since "),
], ids=["approved", "rejected", "timed-out", "never-answered"])
def test_a_load_that_asked_for_approval_commits_only_when_a_person_approved_it(log, store, answer, committed, reason):
    from datetime import datetime, timedelta, timezone

    conns, spec = Conns(store), make_spec()
    _prepared(log, conns, spec)
    audit_step.audit(log, conns, spec.load_id, [])
    asked = approval.ask_approval(log, spec.load_id, timedelta(minutes=30))
    assert set(asked.approval) == {"asked_at", "timeout_at"}
    assert approval.ask_approval(log, spec.load_id, timedelta(minutes=5)).approval == asked.approval, \
        "a retried ask keeps the first one's wait"
    assert asked.exposed_at is None and visible(conns, spec.load_id) == NOTHING
    if answer is not None:
        answered = approval.answer_approval(log, spec.load_id, at=datetime.now(timezone.utc), **answer)
        assert answered.approval["by"] == answer.get("by") and answered.approval["asked_at"] == asked.approval["asked_at"]
        assert approval.ask_approval(log, spec.load_id, timedelta(minutes=5)).approval == answered.approval, \
            "a retried ask keeps the answer"

    decided = coordinator.vote(log, conns, spec.load_id, gates=[AuditGate(required=True), ApprovalGate(required=True)])
    if committed:
        assert decided.state == State.COMMITTING
        coordinator.commit(log, conns, spec.load_id)
        assert visible(conns, spec.load_id) == ALL
    else:
        assert decided.state == State.ABORTING and reason in decided.reason
        assert decided.exposed_at is None, "a load not approved is never made ready"


def test_a_vote_that_requires_approval_aborts_a_load_never_asked(log, store):
    conns, spec = Conns(store), make_spec()
    _prepared(log, conns, spec)
    audit_step.audit(log, conns, spec.load_id, [])
    decided = coordinator.vote(log, conns, spec.load_id, gates=[AuditGate(required=True), ApprovalGate(required=True)])
    assert decided.state == State.ABORTING and "no approval was asked" in decided.reason


def test_an_approval_answered_after_the_load_was_decided_changes_nothing(log, store):
    from datetime import datetime, timedelta, timezone

    conns, spec = Conns(store), make_spec()
    _prepared(log, conns, spec)
    approval.ask_approval(log, spec.load_id, timedelta(minutes=30))
    coordinator.rollback(log, conns, spec.load_id, reason="presumed abort (recovery)")
    after = approval.answer_approval(log, spec.load_id, True, datetime.now(timezone.utc), by="alice")
    assert after.state == State.ABORTED and "decision" not in after.approval
    assert approval.ask_approval(log, spec.load_id, timedelta(minutes=30)) is None, "nothing left to approve"


# -- budgets ------------------------------------------------------------------------------------


def test_a_participant_over_its_budget_aborts_the_load_before_anything_is_made_ready(log, store):
    conns, spec = Conns(store, topic=Faults(over_budget="the copy needs 90 s: raise KafkaTarget.transaction_timeout_ms")), \
        make_spec()
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage())
    decided = coordinator.vote(log, conns, spec.load_id)
    assert decided.state == State.ABORTING
    assert decided.reason == "topic would not commit in time: the copy needs 90 s: raise KafkaTarget.transaction_timeout_ms"
    assert decided.exposed_at is None, "no participant was made ready"
    coordinator.rollback(log, conns, spec.load_id)
    assert visible(conns, spec.load_id) == NOTHING
    assert_nothing_left(store, spec.load_id)


def test_each_commit_keeps_its_outcomes_and_the_next_votes_budget_reads_them_newest_first(log, store):
    seen = []

    class Watching(MemoryParticipant):
        def budget(self, vote, earlier, staged_since):
            seen.append((self.name, earlier, staged_since))
            return ""

    conns = Conns(store)
    conns.participants = lambda spec, attempt=1: [
        Watching(store, spec.load_id, targets, name, may_fail, attempt=attempt)
        for name, (targets, may_fail) in LAYOUT.items()]
    for run in ("run-1", "run-2", "run-3"):
        spec = make_spec(run)
        run_load(log, conns, spec)
        load = log.get(spec.load_id)
        assert load.state == State.COMMITTED
        assert {name: (o["kind"], o["count"]) for name, o in load.outcomes.items()} == {
            "tables": ("done", 2 * N), "topic": ("done", N)}
        assert all(o["seconds"] >= 0 for o in load.outcomes.values())
    # the third load's vote saw the two committed before it, the second's first
    assert [len(earlier) for name, earlier, _ in seen if name == "topic"] == [0, 1, 2]
    third = [(earlier, since) for name, earlier, since in seen if name == "topic"][-1]
    assert third[0] == [log.get(make_spec(r).load_id).outcomes["topic"] for r in ("run-2", "run-1")]
    assert third[1] == log.get(make_spec("run-3").load_id).began_at


@pytest.mark.parametrize("raised, expect", [
    (MemoryUnreachable("memory store m is unreachable: test"), None),  # the decision waits for a retry
    (RuntimeError("staging topic deleted"), "topic would not commit in time: its budget could not be checked: "
                                            "RuntimeError: staging topic deleted"),
])
def test_a_budget_that_cannot_be_checked_retries_or_aborts(log, store, raised, expect):
    class Failing(MemoryParticipant):
        def budget(self, vote, earlier, staged_since):
            if self.name == "topic":
                raise raised
            return ""

    conns, spec = Conns(store), make_spec()
    conns.participants = lambda spec, attempt=1: [
        Failing(store, spec.load_id, targets, name, may_fail, attempt=attempt)
        for name, (targets, may_fail) in LAYOUT.items()]
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage())
    if expect is None:
        with pytest.raises(RetryLater, match="unreachable"):
            coordinator.vote(log, conns, spec.load_id)
        assert log.get(spec.load_id).state == State.PREPARED
    else:
        decided = coordinator.vote(log, conns, spec.load_id)
        assert decided.state == State.ABORTING and decided.reason == expect and decided.exposed_at is None
