"""The participants of a load, built from its targets, and the order they commit in.

Targets of one kind on one server make one participant, with one vote: tables of one
database share one prepared transaction, topics of one cluster one copy transaction. This
module is the one place outside the participants' own packages that maps kinds of target
to participant classes, so every other layer iterates over Participant objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..participant import Participant

if TYPE_CHECKING:  # twophase.spec imports the target classes from this package
    from ..spec import Connections, LoadSpec


def _kinds() -> dict[str, type]:
    from .kafka import KafkaParticipant
    from .postgres import PostgresParticipant

    return {"postgres": PostgresParticipant, "kafka": KafkaParticipant}


def participant_name(kind: str, connection: str) -> str:
    """'postgres' or 'kafka' on the default servers (the names logs before issue 12 used),
    else '<kind>@<connection>'."""
    return f"{kind}@{connection}" if connection else kind


def participants_of(spec: LoadSpec, conns: Connections) -> list[Participant]:
    """The load's participants, in the order its targets first name them (which is the
    order they stage in: describe a table before a topic, and a missing table is found
    before any topic is created)."""
    groups: dict[tuple[str, str], list] = {}
    for target in spec.targets:
        groups.setdefault((target.kind, target.connection), []).append(target)
    kinds = _kinds()
    return [kinds[kind](conns.address(kind, connection), targets, spec.load_id, participant_name(kind, connection))
            for (kind, connection), targets in groups.items()]


def commit_order(participants: list[Participant]) -> list[Participant]:
    """Those whose commit can still fail for good after a yes vote first, then the others;
    by name within each group, so every attempt of a load commits in the same order
    (docs/adr/0001-commit-order.md)."""
    return sorted(participants, key=lambda p: (not p.commit_may_fail, p.name))


def sweep_all(conns: Connections, state_of) -> list:
    """Every kind's orphans on every server the connections know (recovery)."""
    return [swept for kind, cls in _kinds().items() for address in conns.addresses(kind)
            for swept in cls.sweep(address, state_of)]
