"""The transition table: every allowed move passes, every other move raises."""

import itertools

import pytest

from twophase.protocol.states import TERMINAL, TRANSITIONS, IllegalTransition, State, check

ALLOWED = {
    (State.PREPARING, State.PREPARED), (State.PREPARING, State.ABORTING),
    (State.PREPARED, State.COMMITTING), (State.PREPARED, State.ABORTING),
    (State.COMMITTING, State.COMMITTED), (State.COMMITTING, State.ABORTING), (State.COMMITTING, State.VIOLATED),
    (State.ABORTING, State.ABORTED), (State.ABORTING, State.VIOLATED),
}
ALL_PAIRS = list(itertools.product(State, State))


@pytest.mark.parametrize("src,dst", sorted(ALLOWED))
def test_allowed(src, dst):
    check("L", src, dst)


@pytest.mark.parametrize("src,dst", [p for p in ALL_PAIRS if p not in ALLOWED])
def test_forbidden(src, dst):
    with pytest.raises(IllegalTransition, match=f"illegal transition {src} -> {dst}"):
        check("L", src, dst)


def test_terminal_states_are_never_left():
    assert TERMINAL == {State.COMMITTED, State.ABORTED, State.VIOLATED}
    assert all(not TRANSITIONS[s] for s in TERMINAL)


def test_table_is_exactly_the_documented_one():
    assert {(s, d) for s, targets in TRANSITIONS.items() for d in targets} == ALLOWED
