"""recovery.recover resolves each load on its own: a load that races with its own
pipeline's step, or whose resolution raises, is reported and the others are still
resolved and swept; a decided load that cannot finish for too long is reported failed.
In-memory log and participants (test_coordinator.py); the quarantine's retention sweep is
the memory log's."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from test_coordinator import ALL, Conns, frame, make_spec, prepare_and_vote, visible
from twophase.gates import approval
from twophase.log import MemoryLog, StateConflict
from twophase.ops import recovery
from twophase.participants.memory import Faults, LocalStage, MemoryParticipant, MemoryStore
from twophase.protocol import coordinator
from twophase.protocol.outcome import Kind, Outcome
from twophase.protocol.states import State


class RecoveryConns(Conns):
    """The test's servers as recovery sees them: participants of every load, and a sweep.
    Load `raced`'s first committer finds the load committed by another driver meanwhile
    and says FAILED; building the participants of load `broken` raises."""

    def __init__(self, store, log, raced: str, broken: str):
        super().__init__(store)
        self.log, self.raced, self.broken = log, raced, broken

    def participants(self, spec, attempt=1):
        if spec.load_id == self.broken:
            raise ValueError("a participant of this load cannot be built")
        built = super().participants(spec, attempt)
        if spec.load_id == self.raced:
            log = self.log

            class Raced(MemoryParticipant):
                def commit(self, vote):
                    log.transition(self.load_id, State.COMMITTED)  # the pipeline's own commit, meanwhile
                    return Outcome(self.name, Kind.FAILED, "its staged data is gone")

            for p in built:
                if p.name == "topic":
                    p.__class__ = Raced
        return built


def test_a_race_and_a_failure_are_reported_and_every_other_load_is_recovered():
    log, store = MemoryLog(), MemoryStore()
    specs = [make_spec(f"run-{i}") for i in range(3)]
    for spec in specs:
        assert prepare_and_vote(log, Conns(store), spec).state == State.COMMITTING  # then the process died
    raced, broken, plain = (s.load_id for s in specs)
    conns = RecoveryConns(store, log, raced, broken)

    actions = {}
    for action in recovery.recover(log, conns):
        actions.setdefault(action.load_id, action)  # its resolution; then what the sweep did

    assert actions[raced].action == "left to its pipeline" and "COMMITTED" in actions[raced].detail
    assert actions[broken].action == "failed"
    assert "a participant of this load cannot be built" in actions[broken].detail
    assert actions[plain].action == "commit re-driven"
    assert log.get(plain).state == State.COMMITTED and visible(conns, plain) == ALL
    assert log.get(broken).state == State.COMMITTING, "a load recovery could not resolve keeps its decision"


def test_a_decided_load_that_cannot_finish_is_reported_failed_once_it_is_stuck_too_long():
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()
    conns = RecoveryConns(store, log, raced="", broken="")
    conns.faults = {"tables": Faults(fail_at={"commit": "retry"})}  # a server down, for good
    decided = prepare_and_vote(log, conns, spec)
    assert decided.state == State.COMMITTING

    [soon] = [a for a in recovery.recover(log, conns, now=decided.decided_at + timedelta(minutes=30))
              if a.load_id == spec.load_id]
    assert soon.action == "retry later", soon.describe()
    [late] = [a for a in recovery.recover(log, conns, now=decided.decided_at + timedelta(minutes=61))
              if a.load_id == spec.load_id]
    assert late.action == "failed", late.describe()
    assert "COMMITTING for 61 min since its decision, still unable to finish" in late.detail
    assert "tables: retry later" in late.detail, "the reason it cannot finish"
    assert log.get(spec.load_id).state == State.COMMITTING, "still decided COMMIT, and retried at the next run"


def _resolved(log, conns, load_id, **recover_args) -> recovery.Action:
    [action] = [a for a in recovery.recover(log, conns, **recover_args) if a.load_id == load_id]
    return action


def test_an_undecided_load_waits_for_its_deadline_then_is_presumed_aborted():
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()
    conns = RecoveryConns(store, log, raced="", broken="")
    coordinator.begin(log, spec)
    began = log.get(spec.load_id).began_at
    young = _resolved(log, conns, spec.load_id, now=began + timedelta(minutes=30))
    assert young.describe() == (f"{spec.load_id}: waiting (PREPARING, began 30 min ago; presumed abort 120 min "
                                "after the load began)")
    old = _resolved(log, conns, spec.load_id, now=began + timedelta(minutes=121))
    assert old.action == "presumed abort"
    load = log.get(spec.load_id)
    assert load.state == State.ABORTED and load.reason == "presumed abort: no decision 120 min after the load began (recovery)"


def test_a_load_waiting_for_approval_counts_its_deadline_from_the_end_of_the_wait():
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()
    conns = RecoveryConns(store, log, raced="", broken="")
    assert prepare_and_vote(log, conns, spec, rules=()).state == State.COMMITTING  # (a load to compare with)
    waiting = make_spec("run-approval")
    coordinator.begin(log, waiting)
    log.transition(waiting.load_id, State.PREPARED)
    load = approval.ask_approval(log, waiting.load_id, timedelta(hours=3))
    ends = datetime.fromisoformat(load.approval["timeout_at"])
    action = _resolved(log, conns, waiting.load_id, now=ends + timedelta(minutes=119))
    assert action.action == "waiting" and "waiting for approval since" in action.detail
    assert "presumed abort 120 min after its approval's answer or timeout" in action.detail
    assert _resolved(log, conns, waiting.load_id, now=ends + timedelta(minutes=121)).action == "presumed abort"


def test_an_approval_whose_asking_run_ended_is_rejected_and_its_load_rolled_back_at_once():
    """A run killed (or marked failed) while its approve task waited: nobody can answer any
    more, so the load must not keep its interval until the approval's timeout and the
    deadline after it."""
    log, store = MemoryLog(), MemoryStore()
    conns = RecoveryConns(store, log, raced="", broken="")
    ended, running, unknown = make_spec("run-killed"), make_spec("run-waiting"), make_spec("run-unknown")
    for spec in (ended, running, unknown):
        coordinator.begin(log, spec)
        coordinator.prepare(log, conns, spec.load_id, frame(), stage=LocalStage())
        approval.ask_approval(log, spec.load_id, timedelta(hours=3), run={"dag_id": "orders", "run_id": spec.run_id})
    states = {"run-killed": "failed", "run-waiting": "running"}
    asked = []

    def run_state(dag_id, run_id):
        asked.append((dag_id, run_id))
        if run_id not in states:
            raise LookupError(f"no run {run_id}")  # Airflow cannot say: the load keeps waiting
        return states[run_id]

    actions = {a.load_id: a for a in recovery.recover(log, conns, run_state=run_state)}
    assert sorted(asked) == [("orders", "run-killed"), ("orders", "run-unknown"), ("orders", "run-waiting")]
    rejected = actions[ended.load_id]
    assert rejected.action == "rejected, rolled back", rejected.describe()
    assert "the run that asked for approval" in rejected.detail and "ended without an answer" in rejected.detail
    load = log.get(ended.load_id)
    assert load.state == State.ABORTED and "ended without an answer" in load.reason
    assert load.approval["decision"] == "rejected" and load.approval["run_ended"] and load.approval["by"] is None
    assert visible(conns, ended.load_id) == {t: 0 for t in ALL} and not store.staged_rows(ended.load_id)
    for waiting in (running, unknown):
        assert actions[waiting.load_id].action == "waiting" and log.get(waiting.load_id).state == State.PREPARED
    # Without Airflow to ask (the CLI), nothing changes: the approval's own timeout decides.
    again = make_spec("run-cli")
    coordinator.begin(log, again)
    coordinator.prepare(log, conns, again.load_id, frame(), stage=LocalStage())
    approval.ask_approval(log, again.load_id, timedelta(hours=3), run={"dag_id": "orders", "run_id": "run-cli"})
    assert _resolved(log, conns, again.load_id).action == "waiting"


def test_a_decided_rollback_is_re_driven_and_a_commit_that_violates_is_reported_failed():
    log, store = MemoryLog(), MemoryStore()
    conns = RecoveryConns(store, log, raced="", broken="")
    aborting, lost = make_spec("run-aborting"), make_spec("run-lost")
    conns.faults = {"topic": Faults(vote_no=True, fail_at={"abort": "retry"}, times=1)}
    assert prepare_and_vote(log, conns, aborting).state == State.ABORTING
    with pytest.raises(coordinator.RetryLater):
        coordinator.rollback(log, conns, aborting.load_id)  # the rollback task gave up; the fault then cleared
    conns.faults = {"tables": Faults(lose_prepared=True)}
    assert prepare_and_vote(log, conns, lost).state == State.COMMITTING
    actions = {}
    for action in recovery.recover(log, conns):
        actions.setdefault(action.load_id, action)
    assert actions[aborting.load_id].action == "rollback re-driven"
    assert log.get(aborting.load_id).state == State.ABORTED
    failed = actions[lost.load_id]
    assert failed.action == "failed" and f"load {lost.load_id} VIOLATED: topic committed" in failed.detail


def test_a_rollback_that_cannot_finish_says_how_to_end_it_and_only_a_person_abandons_it():
    """Its staging is gone for good: recovery retries, then reports it failed with the way
    out; the interval stays taken until an operator abandons the rollback (a commit
    cannot be abandoned)."""
    log, store = MemoryLog(), MemoryStore()
    conns = RecoveryConns(store, log, raced="", broken="")
    stuck = make_spec("run-stuck")
    conns.faults = {"topic": Faults(vote_no=True, fail_at={"abort": "retry"})}
    decided = prepare_and_vote(log, conns, stuck)
    assert decided.state == State.ABORTING
    [late] = [a for a in recovery.recover(log, conns, now=decided.decided_at + timedelta(hours=2))
              if a.load_id == stuck.load_id]
    assert late.action == "failed"
    assert f"`python -m twophase abandon {stuck.load_id} --reason ...` ends it" in late.detail
    with pytest.raises(StateConflict, match="expected one of: ABORTING"):
        coordinator.abandon(log, _committing(log, conns), "ops", "a commit is never given up")
    conns.faults = {"topic": Faults(vote_no=True, fail_at={"abort": "retry"})}
    load = coordinator.abandon(log, stuck.load_id, by="ops", why="the staging topic was deleted by hand")
    assert load.state == State.ABORTED and load.driver is None
    assert load.reason.endswith("its rollback could not finish and was abandoned by ops: the staging topic was "
                                "deleted by hand")


def _committing(log, conns) -> str:
    spec = make_spec("run-committing")
    conns.faults = {}
    assert prepare_and_vote(log, conns, spec).state == State.COMMITTING
    return spec.load_id
