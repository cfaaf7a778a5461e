"""The coordinator's rarer branches, without servers (the in-memory log and participants
of test_coordinator.py): repeated and late calls, races lost between a read and a claim,
a log that fails while a prepare fails, an audit rule whose rows cannot be read, a fence
that must be retried, a clean-up that raises."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from test_coordinator import (ALL, N, NOTHING, ORDERS, Conns, frame, log, make_spec, prepare_and_vote,  # noqa: F401
                              store, visible)
from twophase.audit import RowCount
from twophase.errors import PostgresUnreachable
from twophase.gates import audit_step
from twophase.log import MemoryLog, StateConflict, Superseded
from twophase.participants.memory import Faults, LocalStage
from twophase.protocol import coordinator
from twophase.protocol.outcome import Kind
from twophase.protocol.states import State


def test_a_repeated_prepare_of_a_prepared_load_returns_its_votes_and_stages_nothing(log, store):
    conns, spec = Conns(store), make_spec()
    coordinator.begin(log, spec)
    votes = coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage())
    built = conns.built
    assert coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage()) == votes
    assert conns.built == built and log.get(spec.load_id).prepare_attempt == 1


def test_a_prepare_that_fails_because_a_later_attempt_took_over_says_superseded(log, store):
    conns, spec = Conns(store), make_spec()
    coordinator.begin(log, spec)

    def staging_taken_away(frames, stagings):
        log.claim_prepare(spec.load_id)  # a retry claimed the load and dropped this attempt's staging
        raise RuntimeError("relation staging_1 does not exist")

    with pytest.raises(Superseded, match="superseded by attempt 2") as raised:
        coordinator.prepare(log, conns, spec.load_id, frame(), stage=staging_taken_away)
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert log.get(spec.load_id).prepare_error is None, "the superseded attempt's symptom is not the load's error"


class FailingLog(MemoryLog):
    """A memory log whose server goes away when `down` is set."""

    down = False

    def get(self, load_id):
        if self.down:
            raise PostgresUnreachable("Postgres at 127.0.0.1:15432 did not answer")
        return super().get(load_id)

    def record_prepare_error(self, load_id, error, attempt=None):
        if self.down:
            raise PostgresUnreachable("Postgres at 127.0.0.1:15432 did not answer")
        return super().record_prepare_error(load_id, error, attempt)


def test_a_failing_prepare_raises_its_own_error_when_the_log_is_gone_too(store):
    log, conns, spec = FailingLog(), Conns(store), make_spec()
    coordinator.begin(log, spec)

    def fails(frames, stagings):
        log.down = True
        raise RuntimeError("the job's own error")

    with pytest.raises(RuntimeError, match="the job's own error"):
        coordinator.prepare(log, conns, spec.load_id, frame(), stage=fails)
    log.down = False
    assert log.get(spec.load_id).prepare_error is None and log.get(spec.load_id).state == State.PREPARING


@dataclass(frozen=True)
class RowsUnreadable(RowCount):
    """A row count whose failing rows cannot be read (a rule of a new kind, say)."""

    def failing(self, audit, limit):
        raise ValueError("the rows are gone")


def test_an_audit_rule_whose_rows_cannot_be_read_says_so_in_the_quarantine(log, store):
    conns, spec = Conns(store), make_spec()
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage())
    report = audit_step.audit(log, conns, spec.load_id, [RowsUnreadable(ORDERS, error=(N + 1, None))])
    assert report.results[0].verdict == "error"
    [kept] = log.quarantined(spec.load_id)
    assert (kept.reason, kept.detail) == ("row_count(shop.orders)", "its rows could not be read: ValueError: the rows are gone")


def test_a_vote_on_a_decided_load_returns_its_decision(log, store):
    conns, spec = Conns(store), make_spec()
    decided = prepare_and_vote(log, conns, spec)
    assert coordinator.vote(log, conns, spec.load_id).state == decided.state == State.COMMITTING
    assert [t.to_state for t in log.history(spec.load_id)] == ["PREPARING", "PREPARED", "COMMITTING"]


class RacingLog(MemoryLog):
    """A memory log where another driver finishes the load (`to`) right before this step
    claims it."""

    to: State | None = None

    def claim_driver(self, load_id, driver, lease, dead=None):
        if self.to is not None:
            to, self.to = self.to, None
            self.transition(load_id, to)
        return super().claim_driver(load_id, driver, lease, dead)


def test_a_commit_that_finds_the_load_finished_before_its_claim_has_nothing_to_do(store):
    log, conns, spec = RacingLog(), Conns(store), make_spec()
    prepare_and_vote(log, conns, spec)
    log.to = State.COMMITTED
    assert coordinator.commit(log, conns, spec.load_id) == []
    assert store.events.count(("commit", "topic", spec.load_id)) == 0


def test_a_rollback_that_finds_the_load_aborted_before_its_claim_has_nothing_to_do(store):
    log, conns, spec = RacingLog(), Conns(store, topic=Faults(vote_no=True)), make_spec()
    assert prepare_and_vote(log, conns, spec).state == State.ABORTING
    log.to = State.ABORTED
    assert coordinator.rollback(log, conns, spec.load_id) == []
    assert coordinator.rollback(log, conns, spec.load_id) == [], "and again"


def test_a_rollback_of_a_committing_load_is_refused(log, store):
    conns, spec = Conns(store), make_spec()
    prepare_and_vote(log, conns, spec)
    with pytest.raises(StateConflict, match="is COMMITTING"):
        coordinator.rollback(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.COMMITTING and log.get(spec.load_id).driver is None


def test_a_fence_that_must_be_retried_keeps_the_decision(log, store):
    conns = Conns(store, topic=Faults(fail_at={"commit": "fail", "abort": "retry"}, times=1))
    spec = make_spec()
    prepare_and_vote(log, conns, spec)
    with pytest.raises(coordinator.RetryLater, match="fencing it before the rollback must be retried"):
        coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.COMMITTING and visible(conns, spec.load_id) == NOTHING
    assert [o.kind for o in coordinator.commit(log, conns, spec.load_id)] == [Kind.DONE, Kind.DONE]
    assert visible(conns, spec.load_id) == ALL, "the faults cleared: the retry commits"


def test_a_clean_up_that_raises_is_reported_and_the_load_stays_committed(log, store):
    conns, spec = Conns(store, tables=Faults(fail_at={"clean_up": "raise"})), make_spec()
    prepare_and_vote(log, conns, spec)
    outcomes = {o.participant: o for o in coordinator.commit(log, conns, spec.load_id)}
    assert outcomes["tables"].counts["staging"].startswith("clean_up raised: MemoryFault")
    assert log.get(spec.load_id).state == State.COMMITTED
