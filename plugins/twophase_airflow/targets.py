"""What a pipeline loads where, as a DAG author writes it: tables, topics and Iceberg
tables, each with its Airflow connection. `LoadConfig(targets=[...])` takes any number of
them; at run time each becomes the core's target description (twophase.spec) for the
run's data interval.

    Table("analytics.customer_daily_totals", interval_column="day")
    Table("analytics.daily_summary", interval_column="day", frame="summary")
    Table("reporting.totals", conn_id="reporting_postgres")          # a second database
    Topic("customer-daily-totals", key_column="customer_id")
    Topic("totals-eu", key_column="customer_id", conn_id="kafka_eu")  # a second cluster
    IcebergTable("analytics.customer_daily_totals", columns={...}, partition_by=("day",))

Tables of one database commit in one prepared transaction, topics of one cluster in one
Kafka transaction, each Iceberg table in one catalog commit; the load commits all of them
atomically.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.spec import SpecError

DEFAULT_POSTGRES = "twophase_postgres"
DEFAULT_KAFKA = "twophase_kafka"
DEFAULT_ICEBERG = "twophase_iceberg"


@dataclass(frozen=True)
class Table:
    """A Postgres table (`schema.table`, with a `load_id text` column).

    - interval_column: the column holding each row's data interval (its day, or hour): in
      mode "replace" the load swaps the rows of its interval for its own, atomically;
      '' means the table is never replaced into (a replace load only adds to it);
    - conn_id: the Airflow connection of its database;
    - frame: which of the job's frames it loads ('' = the main one; see spark_job.Output);
    - ddl: optional idempotent SQL run before each load (`create table if not exists ...`).
    """

    name: str
    interval_column: str = "day"
    conn_id: str = DEFAULT_POSTGRES
    frame: str = ""
    ddl: str | None = None
    kind = "postgres"

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise SpecError(f"Table name must be a string like 'schema.table', got {self.name!r}")
        _check_conn_id(self)
        if self.ddl is not None and not (isinstance(self.ddl, str) and self.ddl.strip()):
            raise SpecError(f"Table {self.name} ddl must be SQL text (create table if not exists ...) or None")
        try:  # the core's rules, so a wrong name fails the DAG file's import
            self.core("replace" if self.interval_column else "append", (date(2026, 1, 1), date(2026, 1, 2)), "")
        except SpecError as exc:
            raise SpecError(f"Table {self.name}: {exc}") from None

    def core(self, mode: str, interval: tuple, connection: str) -> PostgresTarget:
        """The core's target for a run: in mode replace, the rows whose interval column
        equals the interval's start are swapped (a date for a daily interval)."""
        replace_where = {self.interval_column: _value(interval)} if mode == "replace" and self.interval_column else {}
        return PostgresTarget(self.name, "replace" if replace_where else "append", replace_where, connection, self.frame)


@dataclass(frozen=True)
class Topic:
    """A Kafka topic, records keyed by `key_column`, valued by the frame's row as JSON.

    - conn_id: the Airflow connection of its cluster (extra `bootstrap.servers`);
    - frame: which of the job's frames it loads ('' = the main one);
    - partitions, replication_factor (None: the broker's default) and topic_config (Kafka
      topic settings, e.g. {"min.insync.replicas": "2"}): of the topic and its staging
      topic, when the load creates them.
    """

    name: str
    key_column: str
    conn_id: str = DEFAULT_KAFKA
    frame: str = ""
    partitions: int = 3
    replication_factor: int | None = None
    topic_config: dict | None = None
    kind = "kafka"

    def __post_init__(self):
        _check_conn_id(self)
        try:
            self.core("append", None, "")
        except (SpecError, TypeError) as exc:
            raise SpecError(f"Topic {self.name!r}: {exc}") from None

    def core(self, mode: str, interval, connection: str) -> KafkaTarget:
        return KafkaTarget(self.name, self.key_column, partitions=self.partitions,
                           replication_factor=self.replication_factor, topic_config=dict(self.topic_config or {}),
                           connection=connection, frame=self.frame)


@dataclass(frozen=True)
class IcebergTable:
    """An Apache Iceberg table (`namespace.table`) of the catalog of `conn_id` (an Airflow
    connection whose extra holds pyiceberg's catalog properties: type, uri, warehouse...).

    - interval_column: as Table's: in mode "replace" the rows of the run's interval are
      swapped for the load's in the same catalog commit ('' = never replaced into);
    - columns: {name: Iceberg type} ("string", "date", "long", "decimal(12, 2)"...): the
      first load creates the table with them (and a load_id column) when it is missing;
      without them the table must exist;
    - partition_by: identity partition columns of a table the load creates;
    - frame: which of the job's frames it loads ('' = the main one).
    """

    name: str
    interval_column: str = "day"
    conn_id: str = DEFAULT_ICEBERG
    frame: str = ""
    columns: dict | None = None
    partition_by: tuple = ()
    kind = "iceberg"

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise SpecError(f"IcebergTable name must be a string like 'namespace.table', got {self.name!r}")
        _check_conn_id(self)
        try:
            self.core("replace" if self.interval_column else "append", (date(2026, 1, 1), date(2026, 1, 2)), "")
        except (SpecError, TypeError, AttributeError) as exc:
            raise SpecError(f"IcebergTable {self.name}: {exc}") from None

    def core(self, mode: str, interval: tuple, connection: str) -> IcebergTarget:
        replace_where = {self.interval_column: _value(interval)} if mode == "replace" and self.interval_column else {}
        return IcebergTarget(self.name, "replace" if replace_where else "append", replace_where, connection,
                             self.frame, dict(self.columns or {}), tuple(self.partition_by))


def _check_conn_id(target) -> None:
    if not isinstance(target.conn_id, str) or not target.conn_id.strip():
        raise SpecError(f"{type(target).__name__} {target.name!r} conn_id must name an Airflow connection, "
                        f"got {target.conn_id!r}")


def _value(interval: tuple) -> str:
    """The interval's start as its rows hold it: a date for a whole day (midnight to
    midnight), else the instant with its offset (an hour's rows hold the hour's start)."""
    start, end = interval
    if not isinstance(start, datetime):
        return start.isoformat()
    whole_day = (start.hour, start.minute, start.second, start.microsecond) == (0, 0, 0, 0) and \
        (end - start).total_seconds() == 86400
    return start.date().isoformat() if whole_day else start.isoformat()
