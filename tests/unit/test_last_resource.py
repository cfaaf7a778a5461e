"""A load with a last resource (docs/adr/0011), over in-memory participants: one that cannot
prepare ("stock", as a Postgres server with max_prepared_transactions = 0), one that prepares
("tables") and one whose commit may fail ("topic", as a Kafka copy).

The last resource commits in the vote, after the others are ready, and that commit is the
decision; every path that decides ABORT first holds its ABORT marker; recovery asks the
marker before it presumes abort. Each test asserts what readers see and what the log says.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from test_coordinator import (METRICS, N, Conns, FencedLog, assert_nothing_left, crash_at, frame, log, make_spec,  # noqa: F401
                             store, visible)
from twophase.log import UnknownLoad
from twophase.ops import recovery
from twophase.participants.memory import Crashed, Faults, LocalStage
from twophase.protocol import coordinator
from twophase.protocol.coordinator import DecidedCommit, ProtocolViolation, RetryLater, TwoLastResources
from twophase.protocol.outcome import Kind
from twophase.protocol.states import TERMINAL, State

STOCK, ORDERS, DAILY, TOPIC = "stock.orders", "shop.orders", "shop.daily", "orders"
WHY = "max_prepared_transactions = 0 on its server"
LAYOUT = {"stock": ((STOCK,), False, WHY), "tables": ((ORDERS, DAILY), False), "topic": ((TOPIC,), True)}
ALL = {STOCK: N, ORDERS: N, DAILY: N, TOPIC: N}
NOTHING = {target: 0 for target in ALL}
ONLY_STOCK = {**NOTHING, STOCK: N}


def begin_and_prepare(log, conns, spec):
    coordinator.begin(log, spec, conns)
    try:
        coordinator.prepare(log, conns, spec.load_id, frame(), METRICS, stage=LocalStage())
    except Exception:  # noqa: BLE001 - the prepare task failed; the vote decides ABORT
        pass


def run_load(log, conns, spec):
    """The DAG's tasks: begin (with the servers, which choose the last resource), prepare,
    vote, then commit or rollback."""
    begin_and_prepare(log, conns, spec)
    decided = coordinator.vote(log, conns, spec.load_id)
    if decided.state == State.COMMITTING:
        return coordinator.commit(log, conns, spec.load_id)
    return coordinator.rollback(log, conns, spec.load_id)


def recover(log, conns):
    return recovery.recover(log, conns, deadline=timedelta(0))


def decision_marker(store, spec):
    return store.decisions.get(("stock", spec.load_id))


# -- begin chooses it ------------------------------------------------------------------------------


def test_begin_records_the_participant_that_cannot_prepare_and_why(log, store):
    spec = make_spec()
    load = coordinator.begin(log, spec, Conns(store, LAYOUT))
    assert (load.spec().last_resource, load.spec().last_resource_why) == ("stock", WHY)
    plain = make_spec("run-2")
    assert coordinator.begin(log, plain, Conns(store)).spec().last_resource == ""


def test_two_participants_that_cannot_prepare_are_refused_at_begin_with_nothing_logged(log, store):
    layout = {**LAYOUT, "tables": ((ORDERS, DAILY), False, "max_prepared_transactions = 0 on the reports server")}
    spec = make_spec()
    with pytest.raises(TwoLastResources) as refused:
        coordinator.begin(log, spec, Conns(store, layout))
    message = str(refused.value)
    assert "stock cannot prepare (max_prepared_transactions = 0 on its server)" in message
    assert "tables cannot prepare (max_prepared_transactions = 0 on the reports server)" in message
    assert "max_prepared_transactions above 0" in message and "Nothing was staged" in message
    with pytest.raises(UnknownLoad):
        log.get(spec.load_id)
    assert not store.staged and not store.events


# -- the decision ----------------------------------------------------------------------------------


def test_the_last_resources_commit_in_the_vote_is_the_decision_and_the_others_follow(log, store):
    conns, spec = Conns(store, LAYOUT), make_spec()
    begin_and_prepare(log, conns, spec)
    decided = coordinator.vote(log, conns, spec.load_id)
    assert decided.state == State.COMMITTING
    assert visible(conns, spec.load_id) == ONLY_STOCK, "the last resource commits in the vote, alone"
    assert decision_marker(store, spec) == "COMMIT"
    outcomes = coordinator.commit(log, conns, spec.load_id)
    assert [o.participant for o in outcomes] == ["stock", "topic", "tables"]
    assert outcomes[0].kind == Kind.ALREADY_DONE
    assert log.get(spec.load_id).state == State.COMMITTED
    assert visible(conns, spec.load_id) == ALL
    assert store.order("commit", spec.load_id) == ["stock", "topic", "tables"]
    assert_nothing_left(store, spec.load_id)


@pytest.mark.parametrize("why", ["another votes no", "the last resource cannot commit"])
def test_a_load_that_aborts_holds_the_abort_marker_first_and_nothing_is_ever_visible(log, store, why):
    faults = ({"tables": Faults(vote_no=True)} if why == "another votes no"
              else {"stock": Faults(fail_at={"commit": "fail"})})
    conns, spec = Conns(store, LAYOUT, **faults), make_spec()
    run_load(log, conns, spec)
    load = log.get(spec.load_id)
    assert load.state == State.ABORTED
    assert ("tables voted no" if why == "another votes no" else "stock, the load's last resource, did not commit") \
        in load.reason
    assert decision_marker(store, spec) == "ABORT"
    assert visible(conns, spec.load_id) == NOTHING
    assert_nothing_left(store, spec.load_id)


def test_a_retried_vote_after_the_last_resource_committed_decides_commit_readying_nobody_again(log, store):
    conns, spec = Conns(store, LAYOUT, stock=Faults(fail_at={"commit": "crash_after"}, times=1)), make_spec()
    begin_and_prepare(log, conns, spec)
    with pytest.raises(Crashed):
        coordinator.vote(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.PREPARED and decision_marker(store, spec) == "COMMIT"
    # Readying "tables" again would roll back its prepared data to prepare it anew, and a crash
    # in between would lose it: the marker decides first, and nobody is readied.
    retry = Conns(store, LAYOUT, tables=Faults(fail_at={"ready": "crash"}), topic=Faults(fail_at={"ready": "crash"}))
    assert coordinator.vote(log, retry, spec.load_id).state == State.COMMITTING
    coordinator.commit(log, conns.healed(), spec.load_id)
    assert visible(conns, spec.load_id) == ALL


def test_a_commit_outcome_lost_with_its_server_leaves_the_decision_to_the_marker(log, store):
    conns, spec = Conns(store, LAYOUT, stock=Faults(fail_at={"commit": "raise_after"}, times=1)), make_spec()
    begin_and_prepare(log, conns, spec)
    with pytest.raises(RetryLater, match="its commit is the load's decision"):
        coordinator.vote(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.PREPARED
    assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING


def test_a_marker_that_cannot_be_read_leaves_the_load_prepared_for_a_retry(log, store):
    conns, spec = Conns(store, LAYOUT), make_spec()
    begin_and_prepare(log, conns, spec)
    down = Conns(store, LAYOUT, stock=Faults(fail_at={"decided": "down"}))
    with pytest.raises(RetryLater, match="unreachable"):
        coordinator.vote(log, down, spec.load_id)
    assert log.get(spec.load_id).state == State.PREPARED and decision_marker(store, spec) is None
    assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING


def test_a_may_fail_commit_failing_after_the_last_resource_committed_violates_the_load(log, store):
    conns, spec = Conns(store, LAYOUT, topic=Faults(fail_at={"commit": "fail"})), make_spec()
    begin_and_prepare(log, conns, spec)
    assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING
    with pytest.raises(ProtocolViolation, match="stock committed .* but topic cannot commit"):
        coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.VIOLATED
    assert visible(conns, spec.load_id)[STOCK] == N, "a committed last resource is never rolled back"


# -- races: who decides first wins, by the marker ----------------------------------------------------


def test_a_presumed_abort_that_claims_the_marker_first_makes_the_votes_commit_fail(log, store):
    conns, spec = Conns(store, LAYOUT), make_spec()
    begin_and_prepare(log, conns, spec)
    # Recovery presumes abort after the vote read PREPARED and made the others ready, before
    # the last resource commits.
    raced = FencedLog(log, "mark_exposed", lambda: coordinator.rollback(log, conns, spec.load_id, reason="presumed"))
    decided = coordinator.vote(raced, conns, spec.load_id)
    assert decided.state == State.ABORTED and decided.reason == "presumed"
    assert decision_marker(store, spec) == "ABORT"
    assert visible(conns, spec.load_id) == NOTHING
    assert_nothing_left(store, spec.load_id)


def test_a_presumed_abort_after_the_last_resource_committed_logs_commit_and_recovery_finishes_it(log, store):
    conns, spec = Conns(store, LAYOUT), make_spec()
    begin_and_prepare(log, conns, spec)

    def recovery_runs():  # the vote committed the last resource; recovery runs before its decision is logged
        actions = recover(log, conns)
        assert [(a.load_id, a.action) for a in actions if a.load_id == spec.load_id] == [
            (spec.load_id, "commit re-driven")]

    raced = FencedLog(log, "transition", recovery_runs)
    assert coordinator.vote(raced, conns, spec.load_id).state == State.COMMITTED  # its own decision lost the race
    assert visible(conns, spec.load_id) == ALL


def test_an_operators_rollback_of_a_load_whose_last_resource_committed_is_refused_loudly(log, store):
    conns, spec = Conns(store, LAYOUT, stock=Faults(fail_at={"commit": "crash_after"}, times=1)), make_spec()
    begin_and_prepare(log, conns, spec)
    with pytest.raises(Crashed):
        coordinator.vote(log, conns, spec.load_id)
    with pytest.raises(DecidedCommit, match="stock, its last resource, committed before the decision was logged"):
        coordinator.rollback(log, conns.healed(), spec.load_id, reason="an operator")
    assert log.get(spec.load_id).state == State.COMMITTING


# -- a crash anywhere, then recovery -------------------------------------------------------------

# where the process dies -> (the load's state left in the log, its state after recovery); as
# test_coordinator's CASES. "ABORT": "tables" votes no, so the load aborts.
CASES = {
    "stock.prepare": (State.PREPARING, State.ABORTED),
    "stock.ready": (State.PREPARED, State.ABORTED),
    "coordinator.readied": (State.PREPARED, State.ABORTED),
    "stock.commit": (State.PREPARED, State.ABORTED),              # before its local commit
    "stock.commit done": (State.PREPARED, State.COMMITTED),       # after it, its outcome not returned
    "coordinator.last_committed": (State.PREPARED, State.COMMITTED),
    "coordinator.decision_logged": (State.COMMITTING, State.COMMITTED),
    "topic.commit": (State.COMMITTING, State.COMMITTED),
    "tables.commit done": (State.COMMITTING, State.COMMITTED),
    "coordinator.committed_logged": (State.COMMITTED, State.COMMITTED),
    "ABORT stock.claim_abort": (State.PREPARED, State.ABORTED),
    "ABORT stock.claim_abort done": (State.PREPARED, State.ABORTED),
    "ABORT stock.abort": (State.ABORTING, State.ABORTED),
    "ABORT rollback.middle": (State.ABORTING, State.ABORTED),
    "ABORT tables.abort done": (State.ABORTING, State.ABORTED),
}


@pytest.mark.parametrize("point", list(CASES))
def test_a_crash_anywhere_is_finished_by_recovery_atomically(log, store, point, monkeypatch):
    in_doubt, final = CASES[point]
    conns, spec = Conns(store, LAYOUT, **crash_at(point, monkeypatch)), make_spec()

    with pytest.raises(Crashed):
        run_load(log, conns, spec)
    monkeypatch.undo()
    assert log.get(spec.load_id).state == in_doubt

    healed = conns.healed()
    recover(log, healed)
    load = log.get(spec.load_id)
    assert load.state == final, load.reason
    assert visible(healed, spec.load_id) == (ALL if final == State.COMMITTED else NOTHING)
    assert decision_marker(store, spec) == ("COMMIT" if final == State.COMMITTED else "ABORT")
    assert_nothing_left(store, spec.load_id)
    assert recover(log, healed) == [] and log.get(spec.load_id).state == final, "recovery is not idempotent"
    assert final in TERMINAL
