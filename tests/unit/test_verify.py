"""verify, the independent check of the promise, without servers: the in-memory log and
participants of test_coordinator.py, whose store is what readers see. Each state's rule,
a load whose data readers see wrongly, and a load that cannot be checked (its
participants cannot be built, its targets cannot be read), which is said, while every
other load is still checked."""

from __future__ import annotations

import pytest

from test_coordinator import ALL, DAILY, N, ORDERS, TOPIC, Conns, log, make_spec, prepare_and_vote, store  # noqa: F401
from twophase.ops.verify import _replaced_later, verify
from twophase.participants.memory import Faults, MemoryParticipant
from twophase.protocol import coordinator
from twophase.protocol.states import State


def committed(log, store, run: str) -> str:
    conns, spec = Conns(store), make_spec(run)
    prepare_and_vote(log, conns, spec)
    coordinator.commit(log, conns, spec.load_id)
    return spec.load_id


def judged(log, conns, *load_ids):
    return {f.load_id: f for f in verify(log, conns, [log.get(lid) for lid in load_ids])}


def test_a_committed_load_is_exactly_visible_and_an_aborted_one_invisible(log, store):
    good = committed(log, store, "good")
    conns, spec = Conns(store, topic=Faults(vote_no=True)), make_spec("aborted")
    prepare_and_vote(log, conns, spec)
    coordinator.rollback(log, conns, spec.load_id)
    findings = judged(log, Conns(store), good, spec.load_id)
    assert findings[good].ok and findings[good].visible == ALL
    assert findings[good].expected == f"{ORDERS}={N}, {DAILY}={N}, {TOPIC}={N}"
    aborted = findings[spec.load_id]
    assert aborted.ok and aborted.state == "ABORTED" and aborted.expected == "nothing visible"


def test_rows_lost_or_shown_against_the_log_are_violations(log, store):
    lost, shown = committed(log, store, "lost"), committed(log, store, "shown")
    store.committed[("tables", lost)][ORDERS].pop()  # a row gone from a committed load
    spec = make_spec("undecided")
    prepare_and_vote(log, Conns(store, topic=Faults(vote_no=True)), spec)
    store.committed[("topic", spec.load_id)] = {TOPIC: [{"x": 1}]}  # visible though never committed
    findings = judged(log, Conns(store), lost, shown, spec.load_id)
    assert not findings[lost].ok and findings[lost].problem == "committed load not exactly visible"
    assert findings[lost].visible[ORDERS] == N - 1
    assert findings[shown].ok
    assert not findings[spec.load_id].ok and "ABORTING load has visible data" in findings[spec.load_id].problem


def test_a_violated_load_is_always_a_finding(log, store):
    conns, spec = Conns(store, tables=Faults(lose_prepared=True)), make_spec("lost")
    prepare_and_vote(log, conns, spec)
    with pytest.raises(coordinator.ProtocolViolation):
        coordinator.commit(log, conns, spec.load_id)
    [finding] = verify(log, Conns(store), [log.get(spec.load_id)])
    assert not finding.ok and finding.problem.startswith("load is VIOLATED: topic committed")


@pytest.mark.parametrize("visible_first, ok", [(False, True), (True, True), ("part", False)])
def test_a_committing_load_may_show_a_prefix_of_its_participants_each_whole(log, store, visible_first, ok):
    """Committed in order (topic first): nothing, or the topic whole, is a load in doubt;
    part of the topic is a violation."""
    conns, spec = Conns(store), make_spec()
    assert prepare_and_vote(log, conns, spec).state == State.COMMITTING
    if visible_first:
        rows = [{"customer_id": "c", "amount": i} for i in range(N if visible_first is True else N - 3)]
        store.committed[("topic", spec.load_id)] = {TOPIC: rows}
    [finding] = verify(log, Conns(store), [log.get(spec.load_id)])
    assert finding.ok == ok and finding.expected == "in doubt: commit pending (recovery finishes it)"
    assert finding.problem == ("" if ok else "partly visible while committing")


def test_a_vote_of_the_old_form_counts_for_the_participants_one_target(log, store):
    conns = Conns(store, {"topic": ((TOPIC,), True)})
    spec = make_spec("old")
    prepare_and_vote(log, conns, spec)
    coordinator.commit(log, conns, spec.load_id)
    vote = log.votes(spec.load_id)["topic"]
    log.record_vote(spec.load_id, type(vote)(vote.participant, True, vote.count, vote.committable))  # no counts
    [finding] = verify(log, conns, [log.get(spec.load_id)])
    assert finding.ok and finding.expected == f"{TOPIC}={N}"


class Unreadable(Conns):
    """The test's servers, where load `broken`'s participants cannot be built and, when
    `down`, the topic's server does not answer reads."""

    def __init__(self, store, broken: str = "", down: bool = False):
        super().__init__(store)
        self.broken, self.down = broken, down

    def participants(self, spec, attempt=1):
        if spec.load_id == self.broken:
            raise KeyError("connection 'warehouse' is not configured")
        built = super().participants(spec, attempt)

        class Down(MemoryParticipant):
            def visible(self, load_ids):
                raise ConnectionError("topic server down")

        for p in built:
            if p.name == "topic" and self.down:
                p.__class__ = Down
        return built


def test_a_load_that_cannot_be_checked_is_said_and_the_others_are_still_checked(log, store):
    broken, other = committed(log, store, "broken"), committed(log, store, "other")
    findings = judged(log, Unreadable(store, broken=broken), broken, other)
    assert not findings[broken].checked and not findings[broken].ok
    assert findings[broken].problem == ("cannot be checked: its participants cannot be built: "
                                        "KeyError: \"connection 'warehouse' is not configured\"")
    assert findings[other].checked and findings[other].ok and findings[other].visible == ALL


def test_a_load_whose_targets_cannot_be_read_is_said(log, store):
    lid = committed(log, store, "unread")
    [finding] = verify(log, Unreadable(store, down=True), [log.get(lid)])
    assert not finding.checked and not finding.ok
    assert finding.problem == f"cannot be checked: {TOPIC} cannot be read: ConnectionError: topic server down"


def test_a_finding_reads_as_one_line_and_as_json(log, store):
    lid = committed(log, store, "shown")
    [finding] = verify(log, Conns(store), [log.get(lid)])
    assert finding.describe_visible() == f"{ORDERS}={N} {DAILY}={N} {TOPIC}={N}"
    assert finding.to_json() == {"load_id": lid, "state": "COMMITTED", "visible": ALL, "expected": finding.expected,
                                 "ok": True, "problem": "", "checked": True}


def test_a_committed_load_a_later_one_replaced_expects_nothing_left_in_tables(log, store):
    """Two committed loads of one day in mode replace: the earlier one's table rows are
    gone (replaced), by the ids the later one names, or by the same rows replaced later."""
    first, second = make_spec("first", mode="replace"), make_spec("second", mode="replace")
    for spec in (first, second):
        prepare_and_vote(log, Conns(store), spec)
        coordinator.commit(log, Conns(store), spec.load_id)
    assert _replaced_later([log.get(first.load_id), log.get(second.load_id)]) == {first.load_id}
    named = make_spec("third").replacing([second.load_id])
    prepare_and_vote(log, Conns(store), named)
    coordinator.commit(log, Conns(store), named.load_id)
    loads = [log.get(x.load_id) for x in (first, second, named)]
    assert _replaced_later(loads) == {first.load_id, second.load_id}
