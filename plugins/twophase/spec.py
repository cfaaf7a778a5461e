"""What a load writes where: the targets and the connections, as plain data.

A LoadSpec is stored with the load in the transaction log (planned participants), so
recovery can finish or discard a load without the pipeline's code.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

# The target classes live with their participants (participants/<kind>/target.py); those
# modules need only twophase.errors, and the participants' packages load their drivers
# lazily, so importing them here makes no cycle and loads no client library.
from .errors import SpecError
from .participants.iceberg.target import IcebergTarget
from .participants.kafka.target import STAGING_SUFFIX, TOPIC_MAX_LENGTH, KafkaTarget, check_topic
from .participants.postgres.target import PostgresTarget
from .participants.target_rules import WRITE_MODES

CONNECTIONS_ENV = "TWOPHASE_CONNECTIONS"
CONNECTIONS_FILE = "twophase-connections.json"  # the file's name, shipped to the Spark driver with --files
ICEBERG_ENV = "TWOPHASE_ICEBERG_CATALOG"

__all__ = ["CONNECTIONS_ENV", "CONNECTIONS_FILE", "ICEBERG_ENV", "STAGING_SUFFIX", "TARGET_KINDS", "TOPIC_MAX_LENGTH", "WRITE_MODES",
           "Connections", "IcebergTarget", "KafkaTarget", "LoadSpec", "PostgresTarget", "SpecError", "Target",
           "check_topic", "target_from_json", "target_to_json"]


TARGET_KINDS = {"postgres": PostgresTarget, "kafka": KafkaTarget, "iceberg": IcebergTarget}
Target = PostgresTarget | KafkaTarget | IcebergTarget


def target_from_json(data: dict) -> Target:
    data = dict(data)
    kind = data.pop("kind")
    if kind not in TARGET_KINDS:
        raise SpecError(f"unknown kind of target {kind!r}; known: {', '.join(TARGET_KINDS)}")
    return TARGET_KINDS[kind](**data)


def target_to_json(target: Target) -> dict:
    return {"kind": target.kind, **asdict(target)}


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
    """Where the servers are. Comes from the environment, a connections file (what the
    prepare operator gives its Spark job) or Airflow connections.

    `pg_dsn`: the transaction log's database, which is also where a table target with no
    `connection` goes; `kafka_bootstrap`: the cluster of a topic target with no
    `connection`; `iceberg_catalog`: the catalog of an Iceberg target with no `connection`
    (a JSON object of pyiceberg catalog properties; TWOPHASE_ICEBERG_CATALOG). `named`:
    other servers by connection name, {name: (kind, DSN, bootstrap servers or catalog
    properties)}, for targets that name them (tables of a second database, topics of a
    second cluster). The environment form is TWOPHASE_CONNECTIONS, a JSON object {name:
    [kind, address]}. DSNs and catalog properties hold passwords: never log them (repr
    hides them).
    """

    pg_dsn: str
    kafka_bootstrap: str
    named: dict = field(default_factory=dict)
    # Finds a connection `named` does not hold, by name: (kind, address). Recovery uses
    # Airflow's, as it finishes loads whose targets name any connection.
    lookup: Callable[[str], tuple[str, str]] | None = field(default=None, repr=False, compare=False)
    iceberg_catalog: str = ""

    @classmethod
    def from_env(cls) -> "Connections":
        """From the environment: for jobs and commands run by hand (`scripts/stack env`)."""
        return cls._from_mapping(os.environ, "the environment", "eval \"$(scripts/stack env)\" or set them")

    @classmethod
    def from_file(cls, path) -> "Connections":
        """From a connections file (to_file): how the prepare operator hands them to the
        Spark driver, so that no secret is on a command line or in Spark's configuration."""
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except OSError as exc:
            raise SpecError(f"cannot read the connections file {path}: {exc.strerror}") from None
        except ValueError:
            raise SpecError(f"the connections file {path} is not JSON") from None
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise SpecError(f"the connections file {path} must be a JSON object of strings, as to_file writes it")
        return cls._from_mapping(values, f"the connections file {path}", "write it with Connections.to_file")

    @classmethod
    def _from_mapping(cls, values, where: str, fix: str) -> "Connections":
        if not values.get("TWOPHASE_PG_DSN"):
            raise SpecError(f"TWOPHASE_PG_DSN not set in {where} (and TWOPHASE_KAFKA_BOOTSTRAP, for topics): {fix}")
        named = values.get(CONNECTIONS_ENV) or "{}"
        try:
            parsed = {name: tuple(value) for name, value in json.loads(named).items()}
        except (ValueError, TypeError, AttributeError):
            raise SpecError(f"{CONNECTIONS_ENV} in {where} must be a JSON object {{name: [kind, address]}}") from None
        return cls(values["TWOPHASE_PG_DSN"], values.get("TWOPHASE_KAFKA_BOOTSTRAP", ""), parsed,
                   iceberg_catalog=values.get(ICEBERG_ENV, ""))

    def to_env(self) -> dict[str, str]:
        """The variables from_env reads (also the content of to_file's file)."""
        env = {"TWOPHASE_PG_DSN": self.pg_dsn, "TWOPHASE_KAFKA_BOOTSTRAP": self.kafka_bootstrap}
        if self.named:
            env[CONNECTIONS_ENV] = json.dumps({name: list(value) for name, value in self.named.items()})
        if self.iceberg_catalog:
            env[ICEBERG_ENV] = self.iceberg_catalog
        return env

    def to_file(self, path) -> None:
        """Write the connections for from_file: a new file only its owner can read (0600)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(self.to_env(), f)

    def _defaults(self) -> dict[str, str]:
        return {"postgres": self.pg_dsn, "kafka": self.kafka_bootstrap, "iceberg": self.iceberg_catalog}

    def address(self, kind: str, connection: str) -> str:
        """The DSN, bootstrap servers or catalog properties of a target's `connection` ('' =
        the default)."""
        if not connection:
            defaults = self._defaults()
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
        defaults = [a for a in [self._defaults().get(kind)] if a]
        return [*defaults, *(address for k, address in self.named.values() if k == kind and address not in defaults)]

    def participants(self, spec: LoadSpec, attempt: int = 1) -> list:
        """The load's participants on these servers (twophase.participant.Participant),
        acting on prepare attempt `attempt`'s staging (a load's: Load.attempt)."""
        from .participants import participants_of

        return participants_of(spec, self, attempt)

    def sweep(self, state_of, pipeline: str | None = None) -> list:
        """Every kind's orphans on these servers (only `pipeline`'s, when given), discarded
        (recovery); [Swept]."""
        from .participants import sweep_all

        return sweep_all(self, state_of, pipeline)

    def __repr__(self) -> str:  # never print a DSN: it holds a password
        iceberg = ", iceberg=<catalog>" if self.iceberg_catalog else ""
        return f"Connections(pg=<dsn>, kafka={self.kafka_bootstrap}{iceberg}, named={sorted(self.named)})"
