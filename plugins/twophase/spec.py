"""What a load writes where: the targets and the connections, as plain data.

A LoadSpec is stored with the load in the transaction log (planned participants), so
recovery can finish or discard a load without the pipeline's code.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
WRITE_MODES = ("append", "replace")


class SpecError(ValueError):
    """A load was described wrongly; the message names the field and the fix."""


@dataclass(frozen=True)
class PostgresTarget:
    """`table` is `schema.table`; it must have a `load_id` text column.

    mode "append" adds the load's rows; mode "replace" first deletes the rows matching
    `replace_where` ({column: value}) inside the same prepared transaction, so readers
    see the old rows until the instant the new ones appear.
    """

    table: str
    mode: str = "append"
    replace_where: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        parts = self.table.split(".")
        if len(parts) != 2 or not all(_IDENT.match(p) for p in parts):
            raise SpecError(f"postgres table {self.table!r} must be schema.table with plain identifiers")
        if self.mode not in WRITE_MODES:
            raise SpecError(f"write mode {self.mode!r} is not one of {WRITE_MODES}")
        if self.mode == "replace" and not self.replace_where:
            raise SpecError("write mode 'replace' needs replace_where: the columns and values of the rows to replace")
        for column in self.replace_where:
            if not _IDENT.match(column):
                raise SpecError(f"replace_where column {column!r} is not a plain identifier")

    @property
    def schema(self) -> str:
        return self.table.split(".")[0]

    @property
    def name(self) -> str:
        return self.table.split(".")[1]


@dataclass(frozen=True)
class KafkaTarget:
    """The target topic and its staging topic; records are keyed by `key_column`."""

    topic: str
    key_column: str
    staging_topic: str = ""
    partitions: int = 3
    replication_factor: int = 1
    # Staged records must outlive the slowest commit and recovery's deadline.
    staging_retention_ms: int = 7 * 24 * 3600 * 1000
    # The commit copy runs in one transaction; the broker's transaction.max.timeout.ms caps this.
    transaction_timeout_ms: int = 15 * 60 * 1000
    # Headers added to every record of the load (a replacement load says what it replaces).
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not self.staging_topic:
            object.__setattr__(self, "staging_topic", f"{self.topic}.twophase-staging")
        for name in (self.topic, self.staging_topic):
            if not _TOPIC.match(name):
                raise SpecError(f"kafka topic {name!r} must be 1-200 characters of letters, digits, '.', '_', '-'")
        if self.topic == self.staging_topic:
            raise SpecError("the staging topic must differ from the target topic")
        reserved = [h for h in self.headers if h == "load_id" or h in ("twophase.part", "twophase.attempt")]
        if reserved:
            raise SpecError(f"kafka headers {reserved} are reserved for the protocol")
        if self.partitions < 1 or self.replication_factor < 1:
            raise SpecError("kafka partitions and replication_factor must be at least 1")


@dataclass(frozen=True)
class LoadSpec:
    load_id: str
    pipeline: str
    run_id: str
    postgres: PostgresTarget
    kafka: KafkaTarget
    data_interval: tuple[str, str] | None = None  # ISO timestamps
    input: dict[str, Any] = field(default_factory=dict)

    def participants(self) -> dict[str, dict]:
        return {"postgres": asdict(self.postgres), "kafka": asdict(self.kafka)}

    @classmethod
    def from_log(cls, row: dict) -> "LoadSpec":
        p = row["participants"]
        interval = row.get("data_interval_start"), row.get("data_interval_end")
        return cls(
            load_id=row["load_id"], pipeline=row["pipeline"], run_id=row["run_id"],
            postgres=PostgresTarget(**p["postgres"]), kafka=KafkaTarget(**p["kafka"]),
            data_interval=None if interval == (None, None) else tuple(str(x) for x in interval),
            input=row.get("input") or {},
        )


@dataclass(frozen=True)
class Connections:
    """Where the servers are. Comes from the environment or from Airflow connections."""

    pg_dsn: str
    kafka_bootstrap: str

    @classmethod
    def from_env(cls) -> "Connections":
        missing = [v for v in ("TWOPHASE_PG_DSN", "TWOPHASE_KAFKA_BOOTSTRAP") if not os.environ.get(v)]
        if missing:
            raise SpecError(f"{' and '.join(missing)} not set: eval \"$(scripts/stack env)\" or set them")
        return cls(os.environ["TWOPHASE_PG_DSN"], os.environ["TWOPHASE_KAFKA_BOOTSTRAP"])

    def __repr__(self) -> str:  # never print the DSN: it holds a password
        return f"Connections(pg=<dsn>, kafka={self.kafka_bootstrap})"
