"""The participants of a load, built from its targets, and the order they commit in.

Targets of one kind on one server make one participant, with one vote: tables of one
database share one prepared transaction, topics of one cluster one copy transaction. A
kind may split a server's targets further (`Participant.group_of`: each Iceberg table
commits on its own). The kinds are named in one place, kinds.py; every other layer
iterates over Participant objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .contract import Participant
from .kinds import KINDS

if TYPE_CHECKING:  # for annotations only: both import this package
    from ..connections import Connections
    from ..spec import LoadSpec


def participant_name(kind: str, connection: str, group: str = "") -> str:
    """'postgres' or 'kafka' on the default servers (the names logs before issue 12 used),
    else '<kind>@<connection>'; then ':<group>' when the kind splits a server's targets
    ('iceberg:analytics.totals')."""
    return (f"{kind}@{connection}" if connection else kind) + (f":{group}" if group else "")


def participants_of(spec: LoadSpec, conns: Connections, attempt: int = 1) -> list[Participant]:
    """The load's participants, acting on prepare attempt `attempt`'s staging, in the
    order its targets first name them (which is the order they stage in: describe a table
    before a topic, and a missing table is found before any topic is created)."""
    kinds = {name: kind.participant_class() for name, kind in KINDS.items()}
    groups: dict[tuple[str, str, str], list] = {}
    for target in spec.targets:
        groups.setdefault((target.kind, target.connection, kinds[target.kind].group_of(target)), []).append(target)
    return with_last_resource(spec, [kinds[kind](conns.address(kind, connection), targets, spec.load_id,
                                                 participant_name(kind, connection, group), attempt)
                                     for (kind, connection, group), targets in groups.items()])


def with_last_resource(spec: LoadSpec, parts: list[Participant]) -> list[Participant]:
    """`parts`, the one begin chose as the load's last resource (spec.last_resource)
    marked so (docs/adr/0011)."""
    for p in parts:
        p.last_resource = p.name == spec.last_resource
    return parts


def last_resource_of(participants: list[Participant]) -> Participant | None:
    return next((p for p in participants if p.last_resource), None)


def commit_order(participants: list[Participant]) -> list[Participant]:
    """The load's last resource first (in phase 2 its commit is done already: it was the
    decision, docs/adr/0011), then those whose commit can still fail for good after a yes
    vote (the likeliest to fail, by `commit_risk`, first of all), then the others; by name
    within each, so every attempt of a load commits in the same order
    (docs/adr/0001-commit-order.md)."""
    return sorted(participants, key=lambda p: (not p.last_resource, not p.commit_may_fail, -p.commit_risk, p.name))


def sweep_all(conns: Connections, state_of, pipeline: str | None = None) -> list:
    """Every kind's orphans on every server the connections know (recovery); only
    `pipeline`'s, when given."""
    return [swept for name, kind in KINDS.items() for address in conns.addresses(name)
            for swept in kind.participant_class().sweep(address, state_of, pipeline)]
