"""Where the servers are: the transaction log's database, each kind's default server and
named connections, from the environment, a connections file or Airflow connections."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable

from .errors import SpecError
from .participants import participants_of, sweep_all
from .participants.kinds import KINDS
from .spec import LoadSpec

CONNECTIONS_ENV = "TWOPHASE_CONNECTIONS"
CONNECTIONS_FILE = "twophase-connections.json"  # the file's name, shipped to the Spark driver with --files
ICEBERG_ENV = "TWOPHASE_ICEBERG_CATALOG"


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
    kafka_bootstrap: str = ""
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
        return {kind.name: getattr(self, kind.default_server) if kind.default_server else ""
                for kind in KINDS.values()}

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

    def every_address(self) -> list[tuple[str, str]]:
        """(kind, address) of every server these connections name, defaults first."""
        return [*((kind, address) for kind, address in self._defaults().items() if address),
                *(tuple(value) for value in self.named.values())]

    def participants(self, spec: LoadSpec, attempt: int = 1) -> list:
        """The load's participants on these servers (twophase.participants.contract.Participant),
        acting on prepare attempt `attempt`'s staging (a load's: Load.attempt)."""
        return participants_of(spec, self, attempt)

    def sweep(self, state_of, pipeline: str | None = None) -> list:
        """Every kind's orphans on these servers (only `pipeline`'s, when given), discarded
        (recovery); [Swept]."""
        return sweep_all(self, state_of, pipeline)

    def __repr__(self) -> str:  # never print a DSN: it holds a password
        iceberg = ", iceberg=<catalog>" if self.iceberg_catalog else ""
        return f"Connections(pg=<dsn>, kafka={self.kafka_bootstrap}{iceberg}, named={sorted(self.named)})"
