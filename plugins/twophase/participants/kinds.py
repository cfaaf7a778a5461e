"""Every kind of target, one record each: the one place that names the kinds.

A kind's own folder (participants/<kind>/) holds its target class (plain data, what a
load says about one table or topic), its participant (the driver side of the protocol)
and its writer (the executor side). The record ties them to the kind's name, the name a
load's targets carry in the log, and to the default server a target without a
`connection` goes to. A new kind is a new folder and one line in KINDS
(participants/README.md).

The participant classes are imported on first use: reading a load's targets (twophase.spec
does) loads no client library.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from .iceberg.target import IcebergTarget
from .kafka.target import KafkaTarget
from .postgres.target import PostgresTarget


@dataclass(frozen=True)
class Kind:
    name: str
    target: type
    participant: str  # the class's name in the kind's package, twophase.participants.<name>
    default_server: str = ""  # the Connections field of a target with no `connection` ('' = none)

    def participant_class(self) -> type:
        return getattr(import_module(f"{__package__}.{self.name}"), self.participant)


KINDS = {kind.name: kind for kind in (
    Kind("postgres", PostgresTarget, "PostgresParticipant", "pg_dsn"),
    Kind("kafka", KafkaTarget, "KafkaParticipant", "kafka_bootstrap"),
    Kind("iceberg", IcebergTarget, "IcebergParticipant", "iceberg_catalog"),
)}
