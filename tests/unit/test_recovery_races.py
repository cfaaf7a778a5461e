"""recovery.recover resolves each load on its own: a load that races with its own
pipeline's step, or whose resolution raises, is reported and the others are still
resolved and swept. In-memory log and participants (test_coordinator.py); the quarantine's
retention sweep, which needs the log's Postgres, is stubbed out."""

from __future__ import annotations

import pytest

from test_coordinator import ALL, Conns, make_spec, prepare_and_vote, visible
from twophase import quarantine, recovery
from twophase.memory_log import MemoryLog
from twophase.outcome import Kind, Outcome
from twophase.participants.memory import MemoryParticipant, MemoryStore
from twophase.states import State


class RecoveryConns(Conns):
    """The test's servers as recovery sees them: participants of every load, and a sweep.
    Load `raced`'s first committer finds the load committed by another driver meanwhile
    and says FAILED; building the participants of load `broken` raises."""

    def __init__(self, store, log, raced: str, broken: str):
        super().__init__(store)
        self.log, self.raced, self.broken = log, raced, broken
        self.pg_dsn = ""  # the quarantine's database: its sweep is stubbed out

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

    def sweep(self, state_of, pipeline=None):
        return MemoryParticipant.sweep(self.store.endpoint, state_of, pipeline)


def test_a_race_and_a_failure_are_reported_and_every_other_load_is_recovered(monkeypatch):
    monkeypatch.setattr(quarantine, "sweep", lambda dsn, retention, pipeline: 0)
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
