"""What a load writes where: the targets and the connections, as plain data.

A LoadSpec is stored with the load in the transaction log (planned participants), so
recovery can finish or discard a load without the pipeline's code.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

from .errors import Terminal

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
TOPIC_MAX_LENGTH = 249  # Kafka refuses longer topic names
STAGING_SUFFIX = ".twophase-staging"
WRITE_MODES = ("append", "replace")
CONNECTIONS_ENV = "TWOPHASE_CONNECTIONS"


class SpecError(Terminal, ValueError):
    """A load was described wrongly; the message names the field and the fix."""


@dataclass(frozen=True)
class PostgresTarget:
    """`table` is `schema.table`; it must have a `load_id` text column.

    mode "append" adds the load's rows; mode "replace" first deletes the rows matching
    `replace_where` ({column: value}) inside the same prepared transaction, so readers
    see the old rows until the instant the new ones appear.
    `connection`: which database ('' = the default one; else a named connection, see
    Connections); tables of one database share one prepared transaction. `frame`: which
    of the job's DataFrames it loads ('' = the job's main one).
    """

    table: str
    mode: str = "append"
    replace_where: dict[str, Any] = field(default_factory=dict)
    connection: str = ""
    frame: str = ""
    kind = "postgres"

    def __post_init__(self):
        _check_names(self)
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
    def relation(self) -> str:
        return self.table.split(".")[1]

    @property
    def name(self) -> str:
        """The target's name in the load (votes, summaries, verify)."""
        return self.table

    def for_replacement(self, replaces: list[str]) -> "PostgresTarget":
        return self


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
    connection: str = ""   # which cluster ('' = the default one); topics of one cluster share one copy
    frame: str = ""        # which of the job's DataFrames it loads ('' = the job's main one)
    # The columns of the frame each record's JSON value holds (empty: all of them).
    value_columns: tuple[str, ...] = ()
    kind = "kafka"

    def __post_init__(self):
        _check_names(self)
        object.__setattr__(self, "value_columns", tuple(self.value_columns))
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


    @property
    def name(self) -> str:
        return self.topic

    @property
    def mode(self) -> str:
        return "append"  # a topic is a log: a replacement load's records say what they replace

    def for_replacement(self, replaces: list[str]) -> "KafkaTarget":
        """Records of a load that replaces its interval carry `twophase.mode: replace` and
        `twophase.replaces: <load ids>`, so consumers can drop what it replaces."""
        return replace(self, headers={**self.headers, "twophase.mode": "replace",
                                      "twophase.replaces": ",".join(replaces)})


TARGET_KINDS = {"postgres": PostgresTarget, "kafka": KafkaTarget}
Target = PostgresTarget | KafkaTarget


def _check_names(target) -> None:
    for name in ("connection", "frame"):
        value = getattr(target, name)
        if not isinstance(value, str) or (value and not _NAME.match(value)):
            raise SpecError(f"{target.kind} target {name} {value!r} must be a name of letters, digits, '_', '.', "
                            "'-' (or empty for the default)")


def target_from_json(data: dict) -> Target:
    data = dict(data)
    kind = data.pop("kind")
    if kind not in TARGET_KINDS:
        raise SpecError(f"unknown kind of target {kind!r}; known: {', '.join(TARGET_KINDS)}")
    return TARGET_KINDS[kind](**data)


def target_to_json(target: Target) -> dict:
    return {"kind": target.kind, **asdict(target)}


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
    """One load: its id, where it comes from, and its targets (any number, any kinds;
    names unique). Stored with the load in the transaction log, so recovery can finish or
    discard it without the pipeline's code."""

    load_id: str
    pipeline: str
    run_id: str
    targets: tuple = ()
    data_interval: tuple[str, str] | None = None  # ISO timestamps
    input: dict[str, Any] = field(default_factory=dict)
    replaces: tuple[str, ...] = ()  # the committed loads of the interval this one replaces

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(self.targets))
        object.__setattr__(self, "replaces", tuple(self.replaces))
        if not self.targets:
            raise SpecError(f"load {self.load_id} has no targets: name at least one table or topic")
        names = [t.name for t in self.targets]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise SpecError(f"load {self.load_id} names the target(s) {twice} twice: each table and topic once")

    @property
    def mode(self) -> str:
        """replace when any target replaces the interval's rows, else append."""
        return "replace" if any(t.mode == "replace" for t in self.targets) else "append"

    def replacing(self, replaces: list[str]) -> "LoadSpec":
        """This load as the replacement of `replaces` (each target marks it its own way)."""
        return replace(self, targets=tuple(t.for_replacement(replaces) for t in self.targets),
                       replaces=tuple(replaces))

    def replace_keys(self) -> list[tuple[str, str]]:
        """(target, the rows it replaces) of each target in mode replace: two loads with a
        key in common replace the same rows of that target."""
        return [(t.name, json.dumps(getattr(t, "replace_where", {}), sort_keys=True, default=str))
                for t in self.targets if t.mode == "replace"]

    def to_log(self) -> dict:
        """The form stored in the log's `participants` column."""
        return {"targets": [target_to_json(t) for t in self.targets], "replaces": list(self.replaces)}

    @classmethod
    def from_log(cls, row: dict) -> "LoadSpec":
        stored = row["participants"]
        if "targets" in stored:
            targets = tuple(target_from_json(t) for t in stored["targets"])
            replaces = tuple(stored.get("replaces", ()))
        else:  # logged before issue 12: {"postgres": {...}, "kafka": {...}}, one of each
            targets = (PostgresTarget(**stored["postgres"]), KafkaTarget(**stored["kafka"]))
            replaces = tuple(x for x in stored["kafka"].get("headers", {}).get("twophase.replaces", "").split(",") if x)
        interval = row.get("data_interval_start"), row.get("data_interval_end")
        return cls(
            load_id=row["load_id"], pipeline=row["pipeline"], run_id=row["run_id"], targets=targets,
            data_interval=None if interval == (None, None) else tuple(str(x) for x in interval),
            input=row.get("input") or {}, replaces=replaces,
        )


@dataclass(frozen=True)
class Connections:
    """Where the servers are. Comes from the environment or from Airflow connections.

    `pg_dsn`: the transaction log's database, which is also where a table target with no
    `connection` goes; `kafka_bootstrap`: the cluster of a topic target with no
    `connection`. `named`: other servers by connection name, {name: (kind, DSN or
    bootstrap servers)}, for targets that name them (tables of a second database, topics
    of a second cluster). The environment form is TWOPHASE_CONNECTIONS, a JSON object
    {name: [kind, address]}. DSNs hold passwords: never log them (repr hides them).
    """

    pg_dsn: str
    kafka_bootstrap: str
    named: dict = field(default_factory=dict)
    # Finds a connection `named` does not hold, by name: (kind, address). Recovery uses
    # Airflow's, as it finishes loads whose targets name any connection.
    lookup: Callable[[str], tuple[str, str]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_env(cls) -> "Connections":
        if not os.environ.get("TWOPHASE_PG_DSN"):
            raise SpecError("TWOPHASE_PG_DSN not set (and TWOPHASE_KAFKA_BOOTSTRAP, for topics): "
                            "eval \"$(scripts/stack env)\" or set them")
        named = os.environ.get(CONNECTIONS_ENV) or "{}"
        try:
            parsed = {name: tuple(value) for name, value in json.loads(named).items()}
        except (ValueError, TypeError, AttributeError):
            raise SpecError(f"{CONNECTIONS_ENV} must be a JSON object {{name: [kind, address]}}") from None
        return cls(os.environ["TWOPHASE_PG_DSN"], os.environ.get("TWOPHASE_KAFKA_BOOTSTRAP", ""), parsed)

    def to_env(self) -> dict[str, str]:
        """The environment from_env reads (for a spark-submit; never for a command line)."""
        env = {"TWOPHASE_PG_DSN": self.pg_dsn, "TWOPHASE_KAFKA_BOOTSTRAP": self.kafka_bootstrap}
        if self.named:
            env[CONNECTIONS_ENV] = json.dumps({name: list(value) for name, value in self.named.items()})
        return env

    def address(self, kind: str, connection: str) -> str:
        """The DSN or bootstrap servers of a target's `connection` ('' = the default)."""
        if not connection:
            defaults = {"postgres": self.pg_dsn, "kafka": self.kafka_bootstrap}
            if not defaults.get(kind):
                raise SpecError(f"a {kind} target must name its connection: there is no default {kind} server")
            return defaults[kind]
        if connection not in self.named and self.lookup is not None:
            self.named[connection] = tuple(self.lookup(connection))
        if connection not in self.named:
            raise SpecError(f"connection {connection!r} of a {kind} target is not configured; known: "
                            f"{', '.join(sorted(self.named)) or 'none'} (Airflow connection ids, or "
                            f"{CONNECTIONS_ENV} outside Airflow)")
        named_kind, address = self.named[connection]
        if named_kind != kind:
            raise SpecError(f"connection {connection!r} is a {named_kind} connection, not a {kind} one")
        return address

    def addresses(self, kind: str) -> list[str]:
        """Every server of this kind the connections know (recovery sweeps them all)."""
        defaults = [a for a in {"postgres": [self.pg_dsn], "kafka": [self.kafka_bootstrap]}.get(kind, []) if a]
        return [*defaults, *(address for k, address in self.named.values() if k == kind and address not in defaults)]

    def participants(self, spec: LoadSpec) -> list:
        """The load's participants on these servers (twophase.participant.Participant)."""
        from .participants import participants_of

        return participants_of(spec, self)

    def sweep(self, state_of) -> list:
        """Every kind's orphans on these servers, discarded (recovery); [Swept]."""
        from .participants import sweep_all

        return sweep_all(self, state_of)

    def __repr__(self) -> str:  # never print a DSN: it holds a password
        return f"Connections(pg=<dsn>, kafka={self.kafka_bootstrap}, named={sorted(self.named)})"
