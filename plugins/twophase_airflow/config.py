"""What a two-phase pipeline loads where: the factory's one argument besides the job."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Callable

from twophase import ids
from twophase.schema import check as check_schema
from twophase.spec import SpecError

from .kinds import KINDS, TARGET_CLASSES
from .kinds.postgres import DEFAULT_CONN_ID as DEFAULT_POSTGRES
from .sources import SOURCE_CLASSES

_NAMES = [f"{cls.__name__}(...)" for cls in TARGET_CLASSES]
_TARGET_NAMES = ", ".join(_NAMES[:-1]) + " or " + _NAMES[-1] if len(_NAMES) > 1 else _NAMES[0]


@dataclass(frozen=True)
class Interval:
    """The data interval a run loads: [start, end), both UTC datetimes."""

    start: datetime
    end: datetime

    @property
    def day(self) -> date:
        """The day the interval starts in (a daily pipeline's day)."""
        return self.start.date()


@dataclass(frozen=True)
class LoadConfig:
    """A load of one Spark job's output into any number of tables and topics, atomically.

    - targets: Table(...), Topic(...) and IcebergTable(...) (twophase_airflow.kinds),
      each name once per kind;
    - describe_input(interval, params, load_id) -> dict: what the job reads, logged with
      the load (the job gets it as spec.input); `interval` is the run's data interval
      (Interval: start, end, day); optional with a source;
    - source: where the input comes from, when the pipeline reads a source (twophase_airflow.
      sources), fixed at begin: KafkaTopicSource and LandingFolder read what follows the
      last committed load, and such loads are exactly once per source, not per data
      interval (a run of an interval already loaded reads what is new); IntervalFolder
      reads the folder of the run's data interval, once per interval;
    - pipeline: the name in the transaction log and in load ids (default: the DAG id); one
      DAG's: a load of it from another DAG is refused at begin (PipelineOfAnotherDag);
    - log_conn_id: the Postgres connection of the transaction log (schema `twophase`);
      tables on it commit in the log's database, tables on other connections in theirs;
    - spark_conn_id: the Spark connection prepare submits to;
    - rules: the audit's rules (twophase.audit: RowCount, NullShare, DuplicateKeys, ...),
      measured on the staged data by the audit task; one at error aborts the load
      (docs/audit.md). Each rule's target is named as in the load: a table
      `schema.table`, a topic by its name, an Iceberg table `iceberg:namespace.table`.
    - quarantine_cap: at most this many staged rows failing each rule are kept in the
      quarantine (default 10,000);
    - schema: {column: Spark type} of the job's main frame (twophase.schema), declared
      once for every target that loads it and gives none of its own: the tables are
      created from it, each topic's values hold its columns, and the frame must match it
      before anything is staged.

    Every name is checked here, with the core's own rules (twophase.spec, twophase.ids),
    so a wrong one fails the DAG file's import (Airflow's DAG import errors) instead of
    every run's begin task.
    """

    targets: tuple
    describe_input: Callable[[Interval, dict, str], dict] | None = None
    source: object = None
    pipeline: str | None = None
    log_conn_id: str = DEFAULT_POSTGRES
    spark_conn_id: str = "spark_default"
    rules: tuple = ()
    quarantine_cap: int = 10_000
    schema: dict | None = None

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(self.targets) if isinstance(self.targets, (list, tuple)) else ())
        if not self.targets:
            raise SpecError(f"LoadConfig targets must list at least one {_TARGET_NAMES}")
        wrong = [t for t in self.targets if not isinstance(t, TARGET_CLASSES)]
        if wrong:
            raise SpecError(f"LoadConfig targets must be {_TARGET_NAMES}, got {wrong[0]!r}")
        if self.schema is not None:
            object.__setattr__(self, "schema", check_schema(self.schema, "LoadConfig schema"))
            object.__setattr__(self, "targets", tuple(
                replace(t, schema=self.schema) if t.frame == "" and t.schema is None else t for t in self.targets))
        keyless = [t.name for t in self.targets if getattr(t, "key", ()) and t.schema is None]
        if keyless:
            raise SpecError(f"Table {keyless[0]} key needs a schema (its own, or LoadConfig's): the key only shapes "
                            "a table made from it")
        names = [(t.kind, t.name) for t in self.targets]
        twice = sorted({n for k, n in names if names.count((k, n)) > 1})
        if twice:
            raise SpecError(f"LoadConfig targets name {twice} more than once: each table and topic once")
        if self.pipeline is not None:
            check_pipeline(self.pipeline, "LoadConfig pipeline")
        if self.describe_input is None and self.source is None:
            raise SpecError("LoadConfig needs a source (KafkaTopicSource, LandingFolder, IntervalFolder) or "
                            "describe_input, "
                            "a function (interval, params, load_id) -> dict of what the job reads")
        if self.describe_input is not None and not callable(self.describe_input):
            raise SpecError("LoadConfig describe_input must be a function (interval, params, load_id) -> dict, "
                            f"got {type(self.describe_input).__name__}")
        if self.source is not None and not isinstance(self.source, SOURCE_CLASSES):
            raise SpecError(f"LoadConfig source must be a KafkaTopicSource(...), a LandingFolder(...) or an "
                            f"IntervalFolder(...), "
                            f"got {self.source!r}")
        self._check_rules()
        if not isinstance(self.quarantine_cap, int) or isinstance(self.quarantine_cap, bool) or self.quarantine_cap < 0:
            raise SpecError(f"LoadConfig quarantine_cap must be 0 or more rows per rule, got {self.quarantine_cap!r}")
        for field in ("log_conn_id", "spark_conn_id"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value.strip():
                raise SpecError(f"LoadConfig {field} must name an Airflow connection, got {value!r}")

    def load_targets(self) -> list[str]:
        """The targets' names in the load (votes, counts, audit rules)."""
        return [t.load_name for t in self.targets]

    def _check_rules(self) -> None:
        from twophase.audit import Rule

        object.__setattr__(self, "rules", tuple(self.rules) if isinstance(self.rules, (list, tuple)) else self.rules)
        if not isinstance(self.rules, tuple):
            raise SpecError(f"LoadConfig rules must be a list of audit rules, got {type(self.rules).__name__}")
        wrong = [r for r in self.rules if not isinstance(r, Rule)]
        if wrong:
            raise SpecError(f"LoadConfig rules must be twophase.audit rules (RowCount, NullShare, ...), got {wrong[0]!r}")
        names = [r.name for r in self.rules]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise SpecError(f"LoadConfig rules name {twice} more than once: give each its own")
        known = self.load_targets()
        for rule in self.rules:
            if rule.target is not None and rule.target not in known:
                raise SpecError(f"audit rule {rule.name} measures {rule.target!r}, which is not a target of this load "
                                f"(its targets: {', '.join(known)})")

    def core_connection(self, target) -> str:
        """The core target's or source's `connection`: '' for the default servers (the log's
        database, the default Kafka connection) and for files, else the Airflow connection id."""
        if not target.conn_id:
            return ""
        default = KINDS[target.kind].default_conn_id or self.log_conn_id
        return "" if target.conn_id == default else target.conn_id

    def conn_ids(self) -> dict[str, str]:
        """{Airflow connection id: kind} of every target's server that is not a default, and
        the source's."""
        named = {t.conn_id: t.kind for t in self.targets if self.core_connection(t)}
        if self.source is not None and self.core_connection(self.source):
            named[self.source.conn_id] = self.source.kind
        return named

    @property
    def input_wait(self):
        """The source's WaitForInput when the pipeline waits for its input (an
        IntervalFolder's `wait`), else None."""
        return getattr(self.source, "wait", None)

    @property
    def ddl(self) -> list[tuple[str, str]]:
        """(connection id, SQL) of every table that has SQL to run before each load
        (Table.setup_sql), in target order."""
        return [(t.conn_id, sql) for t in self.targets if t.kind == "postgres" and (sql := t.setup_sql())]


def check_pipeline(pipeline, what: str = "pipeline name") -> None:
    """The pipeline name goes into every load id: the core's rule for it (twophase.ids)."""
    try:
        ids.load_id_for(pipeline, "check")
    except (ValueError, TypeError) as exc:
        raise SpecError(f"{what}: {exc}; set LoadConfig(pipeline=...) to such a name") from None
