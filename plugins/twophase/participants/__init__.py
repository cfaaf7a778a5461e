"""The participants of a load, built from its description, and the order they commit in.

Today a load describes one Postgres table and one Kafka topic (LoadSpec.postgres,
LoadSpec.kafka); this module is the one place outside the participants' own modules that
maps that description to Participant objects, so every other layer iterates over them.
"""

from __future__ import annotations

from ..participant import Participant
from ..spec import Connections, LoadSpec


def participants_of(spec: LoadSpec, conns: Connections) -> list[Participant]:
    """The load's participants, in the order it describes them (which is the order they
    stage in: a Postgres table missing is found before Kafka topics are created)."""
    from .kafka import KafkaParticipant
    from .postgres import PostgresParticipant

    return [PostgresParticipant(conns.pg_dsn, spec.postgres, spec.load_id),
            KafkaParticipant(conns.kafka_bootstrap, spec.kafka, spec.load_id)]


def commit_order(participants: list[Participant]) -> list[Participant]:
    """Those whose commit can still fail for good after a yes vote first, then the others;
    by name within each group, so every attempt of a load commits in the same order
    (docs/adr/0001-commit-order.md)."""
    return sorted(participants, key=lambda p: (not p.commit_may_fail, p.name))


def sweep_all(conns: Connections, state_of) -> list:
    """Every kind's orphans on the load's servers (recovery)."""
    from .kafka import KafkaParticipant
    from .postgres import PostgresParticipant

    return [*PostgresParticipant.sweep(conns.pg_dsn, state_of), *KafkaParticipant.sweep(conns.kafka_bootstrap, state_of)]
