"""Load states and the one table of allowed transitions.

    PREPARING -> PREPARED -> COMMITTING -> COMMITTED
    PREPARING | PREPARED -> ABORTING -> ABORTED
    COMMITTING -> ABORTING   only while no participant has committed: the Kafka copy
                             failed for good, so Postgres is rolled back (atomicity first)
    COMMITTING | ABORTING -> VIOLATED   a participant lost data the protocol could not
                             protect (say an operator rolled back the prepared transaction);
                             terminal, and loud: the reason says what happened

Terminal states are never left. The decision is the state: COMMITTING means COMMIT was
decided, ABORTING means ABORT was decided.
"""

from __future__ import annotations

from enum import Enum


class State(str, Enum):
    PREPARING = "PREPARING"
    PREPARED = "PREPARED"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"
    VIOLATED = "VIOLATED"

    def __str__(self) -> str:
        return self.value


class Decision(str, Enum):
    COMMIT = "COMMIT"
    ABORT = "ABORT"

    def __str__(self) -> str:
        return self.value


TRANSITIONS: dict[State, frozenset[State]] = {
    State.PREPARING: frozenset({State.PREPARED, State.ABORTING}),
    State.PREPARED: frozenset({State.COMMITTING, State.ABORTING}),
    State.COMMITTING: frozenset({State.COMMITTED, State.ABORTING, State.VIOLATED}),
    State.ABORTING: frozenset({State.ABORTED, State.VIOLATED}),
    State.COMMITTED: frozenset(),
    State.ABORTED: frozenset(),
    State.VIOLATED: frozenset(),
}

TERMINAL = frozenset(s for s, targets in TRANSITIONS.items() if not targets)

# Decided and not finished: phase 2, which one driver at a time drives (twophase/protocol/lease.py).
PHASE_2 = (State.COMMITTING, State.ABORTING)

# Entering these states logs the decision.
DECISION_OF = {State.COMMITTING: Decision.COMMIT, State.ABORTING: Decision.ABORT}

# Entering these states stamps the phase's end (the log's column of that name).
TIMESTAMP_OF = {
    State.PREPARED: "prepared_at",
    State.COMMITTING: "decided_at",
    State.ABORTING: "decided_at",
    State.COMMITTED: "finished_at",
    State.ABORTED: "finished_at",
    State.VIOLATED: "finished_at",
}


class IllegalTransition(Exception):
    """A state change the table forbids; the log is left as it was."""

    def __init__(self, load_id: str, src: State, dst: State):
        super().__init__(f"load {load_id}: illegal transition {src} -> {dst}")
        self.load_id, self.src, self.dst = load_id, src, dst


def check(load_id: str, src: State, dst: State) -> None:
    """Raise IllegalTransition unless src -> dst is in the table."""
    if dst not in TRANSITIONS[src]:
        raise IllegalTransition(load_id, src, dst)
