"""The Postgres participant: COPY into staging, promote inside a prepared transaction.

- begin (driver): check the server can prepare transactions, discard an earlier attempt
  of this load, create an unlogged staging table shaped like the target.
- stage (executors, PartitionCopy): each Spark partition COPYs its rows into staging in
  one transaction that first deletes rows an earlier attempt of the same partition left.
- pre-commit (driver): in one transaction, delete the replaced rows (mode replace), insert
  staging into the target with the load id, write the commit marker, and end with
  PREPARE TRANSACTION. Nothing is visible yet; everything survives a crash.
- commit: COMMIT PREPARED (constant time), then clean_up drops staging. abort: ROLLBACK
  PREPARED and drop staging.
Both are idempotent: the marker row, committed or rolled back with the load, tells a
retry what already happened.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from .. import failpoints, ids
from ..errors import ServerUnreachable, one_line, servers
from ..outcome import Kind, Outcome
from ..spec import PostgresTarget, SpecError
from ..votes import Vote

NAME = "postgres"
PART_COLUMN = "_twophase_part"
MARKERS = "twophase.pg_commit_markers"


class PostgresConfigError(RuntimeError):
    """The server or the target table cannot take part; nothing was written."""


class StagingRefused(ValueError):
    """Postgres refused a row of the load while staging it (COPY); nothing is visible."""


def _connect(dsn: str, autocommit: bool = True):
    """A connection; autocommit unless asked. Use with closing(): since psycopg2 2.9,
    `with conn:` opens a transaction even in autocommit, and COMMIT PREPARED refuses that.
    A server that does not answer raises PostgresUnreachable (errors.servers)."""
    with servers(pg_dsn=dsn):
        conn = psycopg2.connect(dsn)
    conn.autocommit = autocommit
    return conn


@contextmanager
def _autocommit(dsn: str):
    """A cursor of an autocommit connection; a server lost meanwhile raises PostgresUnreachable."""
    conn = _connect(dsn)
    try:
        with servers(pg_dsn=dsn), conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def _is_prepared(cur, gid: str) -> bool:
    """True if gid is a prepared transaction of the cursor's database (COMMIT/ROLLBACK
    PREPARED only work from that database)."""
    cur.execute("select 1 from pg_prepared_xacts where gid = %s and database = current_database()", (gid,))
    return cur.fetchone() is not None


def is_prepared(dsn: str, gid: str) -> bool:
    with _autocommit(dsn) as cur:
        return _is_prepared(cur, gid)


def prepared_gids(dsn: str) -> list[str]:
    """Every prepared transaction of this protocol in the current database."""
    with _autocommit(dsn) as cur:
        cur.execute("select gid from pg_prepared_xacts where gid like %s and database = current_database()",
                    (ids.GID_PREFIX + "%",))
        return [r[0] for r in cur.fetchall()]


def staging_tables(dsn: str) -> dict[str, str]:
    """{staging table: load id} for every staging table left in the staging schema."""
    with _autocommit(dsn) as cur:
        cur.execute("""select c.relname, obj_description(c.oid, 'pg_class') from pg_class c
                       join pg_namespace n on n.oid = c.relnamespace
                       where n.nspname = %s and c.relkind = 'r'""", (ids.STAGING_SCHEMA,))
        return {name: load_id for name, load_id in cur.fetchall()}


def _rollback_gid(cur, gid: str) -> bool:
    """ROLLBACK PREPARED gid; False if it is not prepared in this database (never was, or
    resolved already, possibly by a concurrent actor)."""
    if not _is_prepared(cur, gid):
        return False
    try:
        cur.execute("rollback prepared %s", (gid,))
        return True
    except psycopg2.errors.UndefinedObject:
        return False


def rollback_gid(dsn: str, gid: str) -> bool:
    """ROLLBACK PREPARED an orphaned gid; False if it was already gone."""
    with _autocommit(dsn) as cur:
        return _rollback_gid(cur, gid)


def drop_staging_table(dsn: str, name: str) -> None:
    with _autocommit(dsn) as cur:
        # A prepared transaction that read the table holds a lock on it until resolved:
        # fail with a clear error rather than wait for it forever.
        cur.execute("set lock_timeout = '10s'")
        cur.execute(sql.SQL("drop table if exists {}").format(sql.Identifier(ids.STAGING_SCHEMA, name)))


class PartitionCopy:
    """Executor side: stage one Spark partition's rows. Picklable (plain fields only).

    The partition is replaced as a whole: an advisory lock serializes attempts of the same
    partition, and the rows of any earlier attempt are deleted in the same transaction as
    the new COPY, so a retried or speculative task never leaves duplicates.
    """

    def __init__(self, dsn: str, staging: str, columns: list[str], target: str = ""):
        self.dsn, self.staging, self.columns, self.target = dsn, staging, columns, target

    def open(self, part: int):
        self._part = part
        self._conn = _connect(self.dsn, autocommit=False)
        with servers(pg_dsn=self.dsn):
            cur = self._conn.cursor()
            cur.execute("set local time zone 'UTC'")  # the CSV's timestamps are UTC (spark_stage)
            cur.execute("select pg_advisory_xact_lock(hashtext(%s), %s)", (self.staging, part))
            cur.execute(sql.SQL("delete from {} where {} = %s").format(
                sql.SQL(self.staging), sql.Identifier(PART_COLUMN)), (part,))
        self._cur = cur

    def copy(self, csv_stream) -> int:
        """COPY the CSV stream (columns in self.columns order, then the partition id).
        A value Postgres refuses raises StagingRefused naming the problem and the row."""
        statement = sql.SQL("copy {} ({}) from stdin with (format csv)").format(
            sql.SQL(self.staging), sql.SQL(", ").join(map(sql.Identifier, [*self.columns, PART_COLUMN])))
        try:
            with servers(pg_dsn=self.dsn):
                self._cur.copy_expert(statement.as_string(self._conn), csv_stream, size=1 << 20)
        except (psycopg2.DataError, psycopg2.IntegrityError) as exc:
            raise StagingRefused(self._refusal(exc)) from None
        return self._cur.rowcount

    def _refusal(self, exc: psycopg2.Error) -> str:
        """What COPY refused, where, and what to do, in one line (Postgres' CONTEXT says
        'COPY <staging>, line N[, column C: "value"]'; line N is the partition's row N)."""
        primary = exc.diag.message_primary or str(exc).splitlines()[0]
        context = exc.diag.context or ""
        line = re.search(r"line (\d+)", context)
        column = re.search(r"column (\w+)", context)
        where = (f"row {line.group(1) if line else '?'} of Spark partition {self._part}"
                 + (f", column {column.group(1)}" if column else ""))
        if "0x00" in primary:
            problem = ("a text value holds a NUL character (U+0000), which Postgres cannot store in text: remove it "
                       "in the job, e.g. pyspark.sql.functions.translate(column, '\\x00', '')")
        else:
            problem = (f"{primary}: make the job's value fit the column "
                       f"(or change the column of {self.target or 'the target table'})")
        target = f" for {self.target}" if self.target else ""
        return one_line(f"Postgres refused {where} while staging into {self.staging}{target}: {problem}", 600)

    def commit(self) -> None:
        self._conn.commit()
        self._conn.close()

    def close(self) -> None:
        if not self._conn.closed:
            self._conn.close()


class PostgresParticipant:
    name = NAME

    def __init__(self, dsn: str, target: PostgresTarget, load_id: str):
        self.dsn, self.target, self.load_id = dsn, target, load_id
        self.gid = ids.pg_gid(load_id)
        self.staging = f"{ids.STAGING_SCHEMA}.{ids.staging_table(load_id)}"

    # -- begin ------------------------------------------------------------------------
    def begin(self) -> PartitionCopy:
        """Make a fresh staging table for this load. Idempotent; discards earlier attempts.

        Fails with PostgresConfigError, before writing anything, when the server cannot
        prepare transactions or the target table is missing or has no load_id column.
        """
        with _autocommit(self.dsn) as cur:
            cur.execute("show max_prepared_transactions")
            if int(cur.fetchone()[0]) == 0:
                raise PostgresConfigError(
                    "the Postgres server has max_prepared_transactions = 0, so it cannot take part in a "
                    "two-phase commit: set max_prepared_transactions above the number of loads in flight "
                    "(postgresql.conf) and restart it. Nothing was written.")
            columns = self.target_columns(cur)
            # A retried prepare: the earlier attempt may have prepared already (crash after PREPARE).
            _rollback_gid(cur, self.gid)
            cur.execute("create schema if not exists twophase")
            cur.execute(f"""create table if not exists {MARKERS} (
                gid text primary key, load_id text not null, rows bigint not null,
                deleted bigint not null, prepared_at timestamptz not null default now())""")
            cur.execute(f"create schema if not exists {ids.STAGING_SCHEMA}")
            cur.execute(f"drop table if exists {self.staging}")
            cur.execute(sql.SQL("create unlogged table {} (like {} including defaults)").format(
                sql.SQL(self.staging), sql.Identifier(self.target.schema, self.target.name)))
            cur.execute(f"alter table {self.staging} drop column load_id, add column {PART_COLUMN} int not null")
            cur.execute(f"comment on table {self.staging} is %s", (self.load_id,))
        return PartitionCopy(self.dsn, self.staging, columns, self.target.table)

    def target_columns(self, cur) -> list[str]:
        """The target's columns in table order, without load_id; checks the table exists."""
        cur.execute("""select column_name from information_schema.columns
                       where table_schema = %s and table_name = %s order by ordinal_position""",
                    (self.target.schema, self.target.name))
        columns = [r[0] for r in cur.fetchall()]
        if not columns:
            raise PostgresConfigError(f"target table {self.target.table} does not exist: create it first "
                                      "(with a load_id text column)")
        if "load_id" not in columns:
            raise PostgresConfigError(f"target table {self.target.table} has no load_id column: "
                                      "add `load_id text not null`")
        for column in self.target.replace_where:
            if column not in columns:
                raise SpecError(f"replace_where column {column!r} is not a column of {self.target.table}")
        return [c for c in columns if c != "load_id"]

    # -- pre-commit ---------------------------------------------------------------------
    def pre_commit(self, expected_rows: int) -> Vote:
        """Promote staging into the target inside a prepared transaction; vote.

        Votes no (still prepared, so abort can discard it) when the promoted row count
        differs from what Spark staged.
        """
        conn = _connect(self.dsn)
        try:
            with servers(pg_dsn=self.dsn), conn.cursor() as cur:
                columns = self.target_columns(cur)
                cur.execute("begin")
                deleted = 0
                if self.target.mode == "replace":
                    where = sql.SQL(" and ").join(
                        sql.SQL("{} = %s").format(sql.Identifier(c)) for c in self.target.replace_where)
                    cur.execute(sql.SQL("delete from {} where ").format(
                        sql.Identifier(self.target.schema, self.target.name)) + where,
                        list(self.target.replace_where.values()))
                    deleted = cur.rowcount
                column_list = sql.SQL(", ").join(map(sql.Identifier, columns))
                cur.execute(sql.SQL("insert into {} ({}, load_id) select {}, %s from {}").format(
                    sql.Identifier(self.target.schema, self.target.name), column_list, column_list,
                    sql.SQL(self.staging)), (self.load_id,))
                rows = cur.rowcount
                cur.execute(f"insert into {MARKERS} (gid, load_id, rows, deleted) values (%s, %s, %s, %s)",
                            (self.gid, self.load_id, rows, deleted))
                # Staging is dropped after COMMIT PREPARED (clean_up), not in here: a dropped
                # table's files are unlinked by the commit, which made COMMIT PREPARED grow
                # with the load (105 ms at 5M rows; 0.2 ms without the drop).
                failpoints.hit("pg.before_prepare")
                cur.execute("prepare transaction %s", (self.gid,))
                failpoints.hit("pg.after_prepare")
        finally:
            conn.close()
        detail = {"gid": self.gid, "table": self.target.table, "mode": self.target.mode, "deleted": deleted}
        if rows != expected_rows:
            return Vote(NAME, False, rows, detail, f"promoted {rows} rows but Spark staged {expected_rows}")
        return Vote(NAME, True, rows, detail)

    # -- commit / abort -----------------------------------------------------------------
    def commit(self) -> Outcome:
        """COMMIT PREPARED. Handles: done now; done before (marker visible); the prepared
        transaction gone without its marker (rolled back outside the protocol: FAILED);
        server unreachable (RETRY_LATER)."""
        try:
            with _autocommit(self.dsn) as cur:
                try:
                    cur.execute("commit prepared %s", (self.gid,))
                except psycopg2.errors.UndefinedObject:
                    marker = self._marker(cur)
                    if marker is not None:
                        return Outcome(NAME, Kind.ALREADY_DONE, counts={"rows": marker[0], "deleted": marker[1]})
                    return Outcome(NAME, Kind.FAILED, (
                        f"prepared transaction {self.gid} no longer exists and was not committed: it was "
                        "rolled back outside the protocol (ROLLBACK PREPARED by an operator?), so its rows are lost"))
                marker = self._marker(cur)
            failpoints.hit("pg.committed")
            return Outcome(NAME, Kind.DONE, counts={"rows": marker[0], "deleted": marker[1]} if marker else {})
        except (ServerUnreachable, psycopg2.OperationalError) as exc:  # down, or a lock or a conflict
            return Outcome(NAME, Kind.RETRY_LATER, one_line(str(exc)))

    def clean_up(self) -> str:
        """After the commit: drop the staging table. '' when done, else why it was left
        (recovery's orphan sweep drops it later); never raises, the load is committed."""
        try:
            drop_staging_table(self.dsn, ids.staging_table(self.load_id))
        except (psycopg2.Error, ServerUnreachable) as exc:
            return one_line(f"staging table {self.staging} left for recovery: {exc}")
        return ""

    def abort(self, vote: Vote | None = None) -> Outcome:
        """ROLLBACK PREPARED and drop staging. Handles: prepared (rolled back now); never
        prepared or rolled back before (ALREADY_DONE, staging dropped if left); committed
        already (FAILED: cannot be undone); server unreachable (RETRY_LATER).
        `vote`, when the load got that far, gives the count of prepared rows discarded."""
        try:
            with _autocommit(self.dsn) as cur:
                if self._marker(cur) is not None:
                    return Outcome(NAME, Kind.FAILED, f"{self.gid} is already committed; it cannot be rolled back")
                discarded = _rollback_gid(cur, self.gid)
                staged = self._drop_staging(cur)
        except (ServerUnreachable, psycopg2.OperationalError) as exc:  # down, or a lock or a conflict
            return Outcome(NAME, Kind.RETRY_LATER, one_line(str(exc)))
        counts = {"prepared_transaction": "rolled back" if discarded else "none",
                  "staged_rows_dropped": staged or 0}
        if discarded and vote is not None:
            counts["prepared_rows_discarded"] = vote.count
        done = discarded or staged is not None
        return Outcome(NAME, Kind.DONE if done else Kind.ALREADY_DONE, counts=counts)

    # -- helpers ------------------------------------------------------------------------
    def _marker(self, cur) -> tuple[int, int] | None:
        cur.execute("select to_regclass(%s)", (MARKERS,))
        if cur.fetchone()[0] is None:
            return None
        cur.execute(f"select rows, deleted from {MARKERS} where gid = %s", (self.gid,))
        return cur.fetchone()

    def _drop_staging(self, cur) -> int | None:
        cur.execute("select to_regclass(%s)", (self.staging,))
        if cur.fetchone()[0] is None:
            return None
        cur.execute(f"select count(*) from {self.staging}")
        staged = cur.fetchone()[0]
        cur.execute(f"drop table {self.staging}")
        return staged
