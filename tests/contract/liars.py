"""Participants that break one rule of the contract each, in the way a new kind easily
could, while looking right: the contract suite must reject every one of them
(test_liars_are_rejected.py runs the suite against each). Each is the in-memory
participant with one hook done wrong; with TWOPHASE_CONTRACT_LIARS set, the suite runs
against each as the kind `liar-<name>`, beside the honest ones.
"""

from __future__ import annotations

import copy
import time

from twophase.participants.contract import Swept
from twophase.participants.memory import MemoryParticipant, MemoryStore
from twophase.protocol.outcome import Kind, Outcome
from twophase.protocol.states import State


class CheckThenActCommit(MemoryParticipant):
    """Looks whether the load is committed, then commits: two drivers at once both see
    'not yet' and both add the rows (an INSERT ... SELECT run twice)."""

    def commit(self, vote):
        with self.store.lock:
            done = self._key in self.store.committed
            prepared = copy.deepcopy(self.store.prepared.get(self._ready))
        if done:
            return Outcome(self.name, Kind.ALREADY_DONE, visible=self._visible())
        time.sleep(0.2)  # the window between the check and the act
        with self.store.lock:
            committed = self.store.committed.setdefault(self._key, {t: [] for t in self.targets})
            for target, rows in (prepared or {}).items():
                committed[target].extend(rows)
            self.store.prepared.pop(self._ready, None)
        return Outcome(self.name, Kind.DONE, visible=self._visible())


class EagerSweep(MemoryParticipant):
    """Sweeps the prepared data of every load that is not PREPARED, in flight or not."""

    @classmethod
    def sweep(cls, endpoint, state_of, pipeline=None):
        store = MemoryStore.at(endpoint)
        with store.lock:
            states = state_of({lid for _, lid, _ in store.prepared})
            swept = []
            for key in list(store.prepared):
                if states.get(key[1]) != State.PREPARED:
                    del store.prepared[key]
                    swept.append(Swept(key[1], "orphan prepared data discarded", key[0]))
        return swept


class AbortLeavesItHeld(MemoryParticipant):
    """Takes a lock when made ready and forgets it at abort (a prepared transaction that an
    abort does not roll back)."""

    def ready(self, vote):
        with self.store.lock:
            self.store.held.add(self._key)
        return super().ready(vote)

    def commit(self, vote):
        outcome = super().commit(vote)
        with self.store.lock:
            self.store.held.discard(self._key)
        return outcome


class CommitsAfterAbort(MemoryParticipant):
    """Forgets that it aborted: a later commit makes the staged rows visible after all."""

    def abort(self, vote):
        with self.store.lock:
            kept = copy.deepcopy(self.store.prepared.get(self._ready))
        outcome = super().abort(vote)
        with self.store.lock:
            self.store.aborted.discard(self._key)
            if kept is not None:
                self.store.prepared[self._ready] = kept  # only marked discarded
        return outcome


class VotesWhatSparkSaid(MemoryParticipant):
    """Votes yes with Spark's count instead of counting what it staged."""

    def prepare(self, marks, reports, expected):
        vote = super().prepare(marks, reports, expected)
        counts = {t: expected.get(t, 0) for t in self.targets}
        return type(vote)(vote.participant, True, sum(counts.values()), vote.committable, "", counts, vote.summary)


class DoneWithNothing(MemoryParticipant):
    """Answers DONE, saying the vote's rows are visible, without making anything visible."""

    def commit(self, vote):
        with self.store.lock:
            self.store.prepared.pop(self._ready, None)
        return Outcome(self.name, Kind.DONE, visible=dict(vote.counts or {}))


LIARS = {cls.__name__: cls for cls in (CheckThenActCommit, EagerSweep, AbortLeavesItHeld, CommitsAfterAbort,
                                       VotesWhatSparkSaid, DoneWithNothing)}
