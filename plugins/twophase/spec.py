"""What a load writes where: the targets and the connections, as plain data.

A LoadSpec is stored with the load in the transaction log (planned participants), so
recovery can finish or discard a load without the pipeline's code.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import Terminal

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
TOPIC_MAX_LENGTH = 249  # Kafka refuses longer topic names
STAGING_SUFFIX = ".twophase-staging"
WRITE_MODES = ("append", "replace")


class SpecError(Terminal, ValueError):
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
        check_topic(self.topic)
        if not self.staging_topic:
            object.__setattr__(self, "staging_topic", f"{self.topic}{STAGING_SUFFIX}")
            if len(self.staging_topic) > TOPIC_MAX_LENGTH:
                raise SpecError(f"kafka topic {self.topic[:40]}... is {len(self.topic)} characters long: its staging "
                                f"topic (the name plus {STAGING_SUFFIX!r}) would exceed Kafka's limit of "
                                f"{TOPIC_MAX_LENGTH}; shorten the topic name to at most "
                                f"{TOPIC_MAX_LENGTH - len(STAGING_SUFFIX)} characters or set staging_topic")
        check_topic(self.staging_topic, "kafka staging topic")
        if self.topic == self.staging_topic:
            raise SpecError("the staging topic must differ from the target topic")
        if not isinstance(self.key_column, str) or not _IDENT.match(self.key_column):
            raise SpecError(f"kafka key_column {self.key_column!r} must be a plain identifier (letters, digits, '_'; "
                            "not starting with a digit): the name of a column of the job's output")
        reserved = [h for h in self.headers if h == "load_id" or h in ("twophase.part", "twophase.attempt")]
        if reserved:
            raise SpecError(f"kafka headers {reserved} are reserved for the protocol")
        for name in ("partitions", "replication_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"kafka {name} must be a whole number of at least 1, got {value!r}")


def check_topic(name, what: str = "kafka topic") -> None:
    """Raise SpecError unless Kafka accepts `name` as a topic name."""
    if not isinstance(name, str) or not name:
        raise SpecError(f"{what} must be a non-empty name, got {name!r}")
    if not _TOPIC.match(name):
        raise SpecError(f"{what} {name!r} has characters Kafka refuses in topic names: "
                        "use only letters, digits, '.', '_' and '-'")
    if name in (".", ".."):
        raise SpecError(f"{what} {name!r} is a name Kafka refuses ('.' and '..' are not topic names): choose another")
    if len(name) > TOPIC_MAX_LENGTH:
        raise SpecError(f"{what} {name[:40]}... is {len(name)} characters long; Kafka allows at most "
                        f"{TOPIC_MAX_LENGTH}: choose a shorter name")


@dataclass(frozen=True)
class LoadSpec:
    load_id: str
    pipeline: str
    run_id: str
    postgres: PostgresTarget
    kafka: KafkaTarget
    data_interval: tuple[str, str] | None = None  # ISO timestamps
    input: dict[str, Any] = field(default_factory=dict)

    @property
    def replaces(self) -> list[str]:
        """The committed loads this one replaces (begin of an interval in mode replace)."""
        return [x for x in self.kafka.headers.get("twophase.replaces", "").split(",") if x]

    def replaces_same_rows_as(self, other: "LoadSpec") -> bool:
        """Both replace the same rows of the same table (mode replace, same key values)."""
        mine, theirs = self.postgres, other.postgres
        return (mine.mode == theirs.mode == "replace" and mine.table == theirs.table
                and mine.replace_where == theirs.replace_where)

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

    def participants(self, spec: LoadSpec) -> list:
        """The load's participants on these servers (twophase.participant.Participant)."""
        from .participants import participants_of

        return participants_of(spec, self)

    def sweep(self, state_of) -> list:
        """Every kind's orphans on these servers, discarded (recovery); [Swept]."""
        from .participants import sweep_all

        return sweep_all(self, state_of)

    def __repr__(self) -> str:  # never print the DSN: it holds a password
        return f"Connections(pg=<dsn>, kafka={self.kafka_bootstrap})"
