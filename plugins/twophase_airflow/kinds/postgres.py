"""Postgres tables in Airflow: the Table a DAG author lists, its Asset, and the database of
an Airflow connection of type postgres (host, port, schema = database, login, password)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from psycopg2.extensions import make_dsn, parse_dsn

from twophase.participants.postgres import PostgresTarget
from twophase.schema import check as check_schema, create_table_sql
from twophase.spec import SpecError

from .shared import AirflowKind, check_conn_id, interval_value, named_asset

DEFAULT_CONN_ID = "twophase_postgres"


@dataclass(frozen=True)
class Table:
    """A Postgres table (`schema.table`, with a `load_id text` column).

    - interval_column: the column holding each row's data interval (its day, or hour): in
      mode "replace" the load swaps the rows of its interval for its own, atomically;
      '' means the table is never replaced into (a replace load only adds to it);
    - conn_id: the Airflow connection of its database;
    - frame: which of the job's frames it loads ('' = the main one; see spark_job.Output);
    - ddl: optional idempotent SQL run before each load (`create table if not exists ...`);
    - prepared: how its database commits: None (the default), with a prepared transaction
      where the server allows them, else (max_prepared_transactions = 0, as stock
      PostgreSQL and Amazon RDS ship) as the load's last resource, whose commit is the
      decision; True insists on a prepared transaction; False always commits last
      (docs/protocol.md, "A Postgres database that cannot prepare"). At most one database
      of a load commits last;
    - schema: {column: Spark type} of its frame (twophase.schema; LoadConfig(schema=...)
      gives it to every target of the main frame): without a ddl, begin creates the table
      from it when missing (with load_id, and a primary key on `key`); the frame must match
      it, and a table that lacks one of its columns is refused, naming the `alter table`.
    - publish: "insert" (the default), or "attach": the table is partitioned by range on
      interval_column, and each load becomes the partition of its interval (ATTACH
      PARTITION; a replace swaps that partition; docs/adr/0013). A table begin makes from
      the schema is then partitioned so, and `key` must include interval_column.
    """

    name: str
    interval_column: str = "day"
    conn_id: str = DEFAULT_CONN_ID
    frame: str = ""
    ddl: str | None = None
    prepared: bool | None = None
    schema: dict | None = None
    key: tuple = ()
    publish: str = "insert"
    kind = "postgres"

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise SpecError(f"Table name must be a string like 'schema.table', got {self.name!r}")
        check_conn_id(self)
        object.__setattr__(self, "key", tuple(self.key))
        if self.schema is not None:
            object.__setattr__(self, "schema", check_schema(self.schema, f"Table {self.name} schema"))
            unknown = [c for c in self.key if c not in self.schema]
            if unknown:
                raise SpecError(f"Table {self.name} key names {unknown}, which are not columns of its schema")
        if self.publish == "attach" and (not self.interval_column or (self.key and self.interval_column
                                                                      not in self.key)):
            raise SpecError(f"Table {self.name}: publish 'attach' partitions it by interval_column, so it needs one "
                            "(and a key that includes it)")
        if self.ddl is not None and not (isinstance(self.ddl, str) and self.ddl.strip()):
            raise SpecError(f"Table {self.name} ddl must be SQL text (create table if not exists ...) or None")
        try:  # the core's rules, so a wrong name fails the DAG file's import
            self.core("replace" if self.interval_column else "append", (date(2026, 1, 1), date(2026, 1, 2)), "")
        except SpecError as exc:
            raise SpecError(f"Table {self.name}: {exc}") from None

    def setup_sql(self) -> str | None:
        """The SQL begin runs before each load: the ddl, else the table made from the
        schema (create table if not exists), else none."""
        if self.ddl is None and self.schema is not None:
            return create_table_sql(self.name, self.schema, self.key,
                                    self.interval_column if self.publish == "attach" else "")
        return self.ddl

    @property
    def load_name(self) -> str:
        """Its name in the load (votes, counts, audit rules)."""
        return self.name

    def core(self, mode: str, interval: tuple, connection: str) -> PostgresTarget:
        """The core's target for a run: in mode replace, the rows whose interval column
        equals the interval's start are swapped (a date for a daily interval)."""
        replace_where = ({self.interval_column: interval_value(interval)}
                         if mode == "replace" and self.interval_column else {})
        # publish 'attach' replaces the interval's partition: its target takes no replace_where
        return PostgresTarget(self.name, "replace" if replace_where else "append",
                              {} if self.publish == "attach" else replace_where, connection, self.frame,
                              self.prepared, self.schema or {}, self.publish)


def table_asset(table: str, pg_conn_id: str = DEFAULT_CONN_ID):
    """The Asset a load's commit emits for `table` of connection `pg_conn_id`."""
    if not isinstance(table, str):
        raise SpecError(f"table_asset: table must be a string like 'schema.table', got {table!r}")
    return named_asset("table_asset", "postgres", table, pg_conn_id, PostgresTarget, DEFAULT_CONN_ID)


def address(conn, conn_id: str) -> str:
    """The connection's DSN, its password masked in task logs."""
    from airflow.sdk.log import mask_secret

    if conn.password:
        mask_secret(conn.password)
    return make_dsn(host=conn.host or "localhost", port=conn.port or 5432, dbname=conn.schema or "postgres",
                    user=conn.login, password=conn.password or None)


def secrets(dsn: str) -> set[str]:
    return {parse_dsn(dsn).get("password") or ""} - {""}


POSTGRES = AirflowKind("postgres", Table, "", ("postgres", "postgresql"), address, secrets, table_asset)
