"""Phase 2 has one driver at a time (twophase/protocol/lease.py): while a step commits or rolls a
load back, a second step (a retried task, recovery) is refused and leaves the load to it;
a dead driver's load is taken over once its lease ends; a driver that stalled past its
lease changes nothing; a first committer that failed is fenced before the decision turns.
In-memory log and participants (test_coordinator.py); threads stand for processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone

import pytest

from test_coordinator import ALL, NOTHING, Conns, make_spec, prepare_and_vote, visible
from twophase.errors import SpecError
from twophase.log import DriverBusy, LeaseLost, MemoryLog
from twophase.ops import recovery
from twophase.participants.memory import MemoryParticipant, MemoryStore
from twophase.protocol import coordinator, lease
from twophase.protocol.outcome import Kind, Outcome
from twophase.protocol.states import State

LEASE = timedelta(minutes=5)


class HookConns(Conns):
    """Conns whose participant `name` runs `hook(participant, vote)` in place of its commit."""

    def __init__(self, store, name, hook):
        super().__init__(store)
        self.name, self.hook = name, hook

    def participants(self, spec, attempt=1):
        built = super().participants(spec, attempt)
        hook = self.hook

        class Hooked(MemoryParticipant):
            def commit(self, vote):
                return hook(self, vote)

        for p in built:
            if p.name == self.name:
                p.__class__ = Hooked
        return built


def commits(store) -> list[str]:
    return [name for event, name, _ in store.events if event == "commit"]


def test_a_second_step_is_refused_while_the_first_commits_and_the_load_commits_once():
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()
    inside, go_on = threading.Event(), threading.Event()

    def slow(p, vote):
        inside.set()
        assert go_on.wait(10)
        return MemoryParticipant.commit(p, vote)

    conns = HookConns(store, "topic", slow)
    assert prepare_and_vote(log, conns, spec).state == State.COMMITTING
    first: dict = {}
    driver = threading.Thread(target=lambda: first.update(out=coordinator.commit(log, conns, spec.load_id)))
    driver.start()
    assert inside.wait(10)
    try:
        with pytest.raises(DriverBusy, match=f"load {spec.load_id} is being driven by"):
            coordinator.commit(log, conns, spec.load_id)  # the task retried while the first still runs
        [action] = [a for a in recovery.recover(log, conns) if a.load_id == spec.load_id]
        assert action.action == "left to its driver", action.describe()
        assert log.get(spec.load_id).state == State.COMMITTING
    finally:
        go_on.set()
        driver.join(10)
    assert [o.kind for o in first["out"]] == [Kind.DONE, Kind.DONE]
    assert log.get(spec.load_id).state == State.COMMITTED and log.get(spec.load_id).driver is None
    assert commits(store) == ["topic", "tables"], "each participant committed once, by the one driver"
    assert visible(conns, spec.load_id) == ALL
    assert coordinator.commit(log, conns, spec.load_id) == [], "the retry finds it done"


def test_a_dead_drivers_load_is_left_alone_until_its_lease_ends_then_taken_over():
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()
    conns = Conns(store)
    prepare_and_vote(log, conns, spec)
    log.claim_driver(spec.load_id, "a task that died", LEASE)
    with pytest.raises(DriverBusy, match="a task that died"):
        coordinator.commit(log, conns, spec.load_id)
    assert commits(store) == []
    log.claim_driver(spec.load_id, "a task that died", timedelta(0))  # as if its lease had run out
    assert [o.kind for o in coordinator.commit(log, conns, spec.load_id)] == [Kind.DONE, Kind.DONE]
    assert log.get(spec.load_id).state == State.COMMITTED and visible(conns, spec.load_id) == ALL


def test_a_driver_whose_process_is_gone_is_taken_over_at_once():
    """A commit task killed on this machine: its lease still lasts, but its process (pid
    and start time) is gone, so the next step takes the load over without waiting."""
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()
    conns = Conns(store)
    prepare_and_vote(log, conns, spec)
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    dead = f"{socket.gethostname()} pid {killed.pid} step 0badc0de [{lease._machine()}:1]"
    alive = f"{socket.gethostname()} pid {os.getpid()} step 0badc0de [{lease._machine()}:{lease._started(os.getpid())}]"
    assert lease.gone(dead) and not lease.gone(alive)
    log.claim_driver(spec.load_id, alive, LEASE)
    with pytest.raises(DriverBusy):
        coordinator.commit(log, conns, spec.load_id)
    log.release_driver(spec.load_id, alive)
    log.claim_driver(spec.load_id, dead, LEASE)
    assert [o.kind for o in coordinator.commit(log, conns, spec.load_id)] == [Kind.DONE, Kind.DONE]
    assert log.get(spec.load_id).state == State.COMMITTED


def test_a_driver_that_stalled_past_its_lease_changes_nothing():
    now = [datetime(2026, 11, 26, tzinfo=timezone.utc)]
    log, store, spec = MemoryLog(clock=lambda: now[0]), MemoryStore(), make_spec()

    def stalls(p, vote):
        outcome = MemoryParticipant.commit(p, vote)
        now[0] += timedelta(minutes=10)  # frozen for longer than its lease
        log.claim_driver(p.load_id, "the next driver", LEASE)
        return outcome

    conns = HookConns(store, "tables", stalls)
    prepare_and_vote(log, conns, spec)
    with pytest.raises(LeaseLost, match="the next driver holds it now"):
        coordinator.commit(log, conns, spec.load_id)
    load = log.get(spec.load_id)
    assert (load.state, load.driver) == (State.COMMITTING, "the next driver"), "the next driver finishes it"


def test_a_first_committer_that_failed_but_landed_keeps_the_decision():
    """The copy's commit timed out in this driver, yet landed (an earlier attempt's, or a
    stalled driver's): the fence (its abort) finds it committed, so the load commits."""
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()

    def landed_anyway(p, vote):
        outcome = MemoryParticipant.commit(p, vote)
        return Outcome(p.name, Kind.FAILED, "the copy's transaction timed out") if outcome.kind == Kind.DONE else outcome

    conns = HookConns(store, "topic", landed_anyway)
    prepare_and_vote(log, conns, spec)
    outcomes = coordinator.commit(log, conns, spec.load_id)
    assert [(o.participant, o.kind) for o in outcomes] == [("topic", Kind.ALREADY_DONE), ("tables", Kind.DONE)]
    assert log.get(spec.load_id).state == State.COMMITTED and visible(conns, spec.load_id) == ALL


def test_a_first_committer_that_failed_for_good_is_fenced_before_the_rollback():
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()
    conns = HookConns(store, "topic", lambda p, vote: Outcome(p.name, Kind.FAILED, "its staged records expired"))
    prepare_and_vote(log, conns, spec)
    with pytest.raises(coordinator.LoadAborted, match="topic failed for good before any participant committed"):
        coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.ABORTED and visible(conns, spec.load_id) == NOTHING
    aborts = [name for event, name, _ in store.events if event == "abort"]
    assert aborts[0] == "topic", "the failed committer is fenced first"


def test_a_first_committer_that_contradicts_itself_ends_the_load_violated():
    """Its commit fails for good, and so does its abort (which says: committed here): no
    honest answer is left, so the load is VIOLATED, loudly, rather than guessed."""
    log, store, spec = MemoryLog(), MemoryStore(), make_spec()

    def committed_but_failing(p, vote):
        MemoryParticipant.commit(p, vote)
        return Outcome(p.name, Kind.FAILED, "it says it cannot")

    conns = HookConns(store, "topic", committed_but_failing)
    prepare_and_vote(log, conns, spec)
    with pytest.raises(coordinator.ProtocolViolation, match="topic cannot commit .it says it cannot., yet its abort"):
        coordinator.commit(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.VIOLATED


@pytest.mark.parametrize("raw", ["0", "-5", "soon", "inf"])
def test_a_lease_length_that_is_no_positive_number_is_refused_naming_it(monkeypatch, raw):
    monkeypatch.setenv("TWOPHASE_DRIVER_LEASE_S", raw)
    with pytest.raises(SpecError, match=f"TWOPHASE_DRIVER_LEASE_S must be a positive number of seconds, not '{raw}'"):
        lease.length()
    monkeypatch.setenv("TWOPHASE_DRIVER_LEASE_S", "2.5")
    assert lease.length() == timedelta(seconds=2.5)
