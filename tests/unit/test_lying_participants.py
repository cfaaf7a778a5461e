"""The coordinator takes no participant's word for it: participants that lie in their
votes (a target left out, counts that do not add up, a readied vote with fewer rows or
under another participant's name) get the load aborted, naming the lie, where they used
to get it committed; a commit that says it is done but made other rows visible than its
vote counted (its prepared data lost, a target left out, rows doubled) ends the load
VIOLATED, naming it, where it used to end COMMITTED. In-memory log and participants, as
tests/unit/test_coordinator.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from twophase.protocol.outcome import Kind, Outcome

from test_coordinator import DAILY, N, NOTHING, ORDERS, TOPIC, Conns, make_spec, prepare_and_vote, visible
from twophase.log import MemoryLog
from twophase.participants.memory import MemoryParticipant, MemoryStore
from twophase.protocol import coordinator
from twophase.protocol.states import State


def _left_out(vote):
    """A yes vote that says nothing of the table `daily`."""
    return replace(vote, count=vote.count - vote.counts[DAILY], counts={ORDERS: vote.counts[ORDERS]})


def _inflated_total(vote):
    return replace(vote, count=vote.count + 5)


def _fewer(vote):
    return replace(vote, count=vote.count - 1, counts={**vote.counts, ORDERS: vote.counts[ORDERS] - 1})


def _as_topic(vote):
    return replace(vote, participant="topic")


def _lost_then_done(participant, outcome):
    """Its prepared data lost before the commit, which answers DONE with nothing visible."""
    participant.store.lose(participant.name, participant.load_id)
    return Outcome(participant.name, Kind.DONE, visible={t: 0 for t in participant.targets})


def _says_nothing(participant, outcome):
    return replace(outcome, visible={})


def _one_target(participant, outcome):
    return replace(outcome, kind=Kind.ALREADY_DONE, visible={ORDERS: outcome.visible[ORDERS]})


def _doubled(participant, outcome):
    return replace(outcome, visible={t: 2 * n for t, n in outcome.visible.items()})


def _as_topics(participant, outcome):
    return replace(outcome, participant="topic")


class Liar(MemoryParticipant):
    """The "tables" participant, whose prepare or ready changes its honest vote, or whose
    commit its honest outcome."""

    lie_at: str = ""
    lie = staticmethod(lambda vote: vote)

    def prepare(self, marks, reports, expected):
        vote = super().prepare(marks, reports, expected)
        return self.lie(vote) if self.lie_at == "prepare" and self.name == "tables" else vote

    def ready(self, vote):
        readied = super().ready(vote)
        return self.lie(readied) if self.lie_at == "ready" and self.name == "tables" else readied

    def commit(self, vote):
        if self.lie_at == "commit" and self.name == "tables":
            return self.lie(self, super().commit(vote) if self.lie is not _lost_then_done else None)
        return super().commit(vote)


class LyingConns(Conns):
    def __init__(self, store, lie_at, lie):
        super().__init__(store)
        self.lie_at, self.lie = lie_at, lie

    def participants(self, spec, attempt=1):
        built = super().participants(spec, attempt)
        for p in built:
            p.__class__ = Liar
            p.lie_at, p.lie = self.lie_at, self.lie
        return built


@pytest.mark.parametrize("lie_at, lie, named", [
    ("prepare", _left_out, "tables voted yes but counted nothing for shop.daily"),
    ("prepare", _inflated_total, f"tables's rows per target add up to {2 * N}, but its total is {2 * N + 5}"),
    ("prepare", _fewer, f"tables staged {N - 1} for shop.orders, but Spark computed {N}"),
    ("prepare", _as_topic, "its vote names another participant, topic"),
    ("ready", _left_out, "after ready: tables voted yes but counted nothing for shop.daily"),
    ("ready", _fewer, f"after ready: tables staged {N - 1} for shop.orders, but Spark computed {N}"),
    ("ready", _as_topic, "its vote names another participant, topic"),
])
def test_a_lying_vote_aborts_the_load_naming_the_lie(lie_at, lie, named):
    log, store = MemoryLog(), MemoryStore()
    conns, spec = LyingConns(store, lie_at, lie), make_spec()
    decided = prepare_and_vote(log, conns, spec)
    assert decided.state == State.ABORTING and named in decided.reason, decided.reason
    coordinator.rollback(log, conns, spec.load_id)
    assert log.get(spec.load_id).state == State.ABORTED
    assert visible(conns, spec.load_id) == NOTHING
    votes = log.votes(spec.load_id)
    assert set(votes) == {"tables", "topic"} and votes["topic"].participant == "topic"
    assert votes["topic"].yes and votes["topic"].counts == {TOPIC: N}, "the other participant's vote was replaced"


@pytest.mark.parametrize("lie, named", [
    (_lost_then_done, f"tables made 0 visible in {ORDERS}, but voted {N}; tables made 0 visible in {DAILY}, but voted"),
    (_says_nothing, f"tables says its commit is done but not what it made visible in {DAILY}, {ORDERS}"),
    (_one_target, f"tables says its commit is done but not what it made visible in {DAILY}"),
    (_doubled, f"tables made {2 * N} visible in {ORDERS}, but voted {N}"),
    (_as_topics, "the commit outcome of tables names another participant, topic"),
])
def test_a_commit_that_made_other_rows_visible_than_voted_ends_violated_naming_them(lie, named):
    log, store = MemoryLog(), MemoryStore()
    conns, spec = LyingConns(store, "commit", lie), make_spec()
    assert prepare_and_vote(log, conns, spec).state == State.COMMITTING
    with pytest.raises(coordinator.ProtocolViolation, match="a commit made visible what its vote did not say"):
        coordinator.commit(log, conns, spec.load_id)
    load = log.get(spec.load_id)
    assert load.state == State.VIOLATED and named in load.reason, load.reason
