"""The Postgres participant: COPY into staging, promote inside a prepared transaction.

- stage (driver): check the server can prepare transactions, discard an earlier attempt
  of this load, create an unlogged staging table shaped like the target.
- write (executors, PostgresWriter): each Spark partition COPYs its rows into staging in
  one transaction that first deletes rows an earlier attempt of the same partition left.
- prepare (driver): in one transaction, delete the replaced rows (mode replace), insert
  staging into the target with the load id, write the commit marker, and end with
  PREPARE TRANSACTION. Nothing is visible yet; everything survives a crash.
- commit: COMMIT PREPARED (constant time), then clean_up drops staging. abort: ROLLBACK
  PREPARED and drop staging.
Both are idempotent: the marker row, committed or rolled back with the load, tells a
retry what already happened.
"""

from __future__ import annotations

import io
import queue
import re
import threading
from contextlib import contextmanager

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg2 import sql

from .. import failpoints, ids
from ..errors import ServerUnreachable, one_line, postgres_unreachable, servers
from ..outcome import Kind, Outcome
from ..participant import Participant, PartitionWriter, Staging, Swept
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


class _Feed:
    """The file-like object COPY reads from, in the writer's COPY thread: one Arrow batch
    per read(), as CSV (psycopg2 sends any length read() returns, so no buffer is sliced
    or copied twice). write() hands batches over through a small queue, so at most a few
    batches wait in memory while COPY sends the one before."""

    def __init__(self, columns: list[str], part: int):
        self.queue: queue.Queue = queue.Queue(maxsize=4)
        self._columns, self._part = columns, part
        self._options = pacsv.WriteOptions(include_header=False)
        self.rows = 0

    def read(self, size: int = -1) -> bytes:
        batch = self.queue.get()
        if batch is _END:
            return b""
        if batch is _CANCEL:
            raise _Cancelled("the Spark task stopped staging this partition")
        part = pa.repeat(pa.scalar(self._part, pa.int32()), batch.num_rows)
        rows = pa.RecordBatch.from_arrays([*(_utc_wall_clock(batch.column(c)) for c in self._columns), part],
                                          names=[*self._columns, PART_COLUMN])
        sink = io.BytesIO()
        pacsv.write_csv(rows, sink, self._options)
        self.rows += batch.num_rows
        return sink.getvalue()


_END, _CANCEL = object(), object()


class _Cancelled(Exception):
    pass


def _utc_wall_clock(column: pa.Array) -> pa.Array:
    """A zoned timestamp column as naive UTC time. Arrow stores UTC instants either way,
    so only the zone is dropped (no copy); pyarrow's CSV writer formats a zoned timestamp
    in 1.4 us, a naive one in 0.05 us, and that was the staging pass's largest cost. The
    COPY session reads timestamps in UTC."""
    if pa.types.is_timestamp(column.type) and column.type.tz is not None:
        return column.cast(pa.timestamp(column.type.unit))
    return column


class PostgresWriter(PartitionWriter):
    """Executor side: stage one Spark partition's rows of one table. Picklable (plain
    fields only).

    The partition is replaced as a whole: an advisory lock serializes attempts of the same
    partition, and the rows of any earlier attempt are deleted in the same transaction as
    the new COPY, so a retried or speculative task never leaves duplicates.

    psycopg2's COPY pulls from a file-like object while the staging pass pushes batches to
    every writer, so COPY runs in a thread of its own reading from a queue (_Feed); the
    CSV of one batch is made there while the task thread hands the next batch to the
    other writers.
    """

    def __init__(self, dsn: str, staging: str, columns: list[str], target: str = ""):
        self.dsn, self.staging, self.columns, self.target = dsn, staging, columns, target

    def open(self, partition: int, attempt: str = "") -> None:
        self._part = partition
        self._conn = _connect(self.dsn, autocommit=False)
        with servers(pg_dsn=self.dsn):
            cur = self._conn.cursor()
            cur.execute("set local time zone 'UTC'")  # the CSV's timestamps are UTC (_utc_wall_clock)
            cur.execute("select pg_advisory_xact_lock(hashtext(%s), %s)", (self.staging, partition))
            cur.execute(sql.SQL("delete from {} where {} = %s").format(
                sql.SQL(self.staging), sql.Identifier(PART_COLUMN)), (partition,))
        self._cur = cur
        self._feed = _Feed(self.columns, partition)
        self._failure: BaseException | None = None
        self._copied: int | None = None
        self._thread = threading.Thread(target=self._copy, name=f"copy-{self.staging}-{partition}", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        statement = sql.SQL("copy {} ({}) from stdin with (format csv)").format(
            sql.SQL(self.staging), sql.SQL(", ").join(map(sql.Identifier, [*self.columns, PART_COLUMN])))
        try:
            with servers(pg_dsn=self.dsn):
                self._cur.copy_expert(statement.as_string(self._conn), self._feed, size=1 << 20)
            self._copied = self._cur.rowcount
        except (psycopg2.DataError, psycopg2.IntegrityError) as exc:
            self._failure = StagingRefused(self._refusal(exc))
        except BaseException as exc:  # noqa: BLE001 - handed to the task thread by _put/close
            self._failure = exc

    def write(self, batch) -> None:
        if batch.num_rows:
            self._put(batch)

    def _put(self, item) -> None:
        """Hand an item to the COPY thread; raises the thread's error if it stopped."""
        while True:
            if self._failure is not None or not self._thread.is_alive():
                self._raise_failure()
            try:
                self._feed.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _raise_failure(self) -> None:
        self._thread.join()
        failure = self._failure or RuntimeError(f"the COPY into {self.staging} stopped without an error")
        raise failure

    def close(self) -> dict:
        """Finish the COPY and commit it; {"rows": n}. Raises StagingRefused naming the row
        Postgres refused, or the error that stopped the COPY."""
        self._put(_END)
        self._thread.join()
        if self._failure is not None:
            self._raise_failure()
        if self._copied != self._feed.rows:
            raise RuntimeError(f"partition {self._part}: COPY took {self._copied} rows of {self._feed.rows}")
        with servers(pg_dsn=self.dsn):
            self._conn.commit()
        self._conn.close()
        return {"rows": self._copied}

    def discard(self) -> None:
        try:
            if self._thread.is_alive():
                try:
                    self._feed.queue.put(_CANCEL, timeout=1)
                except queue.Full:
                    pass
                self._thread.join(5)
            if not self._conn.closed:
                self._conn.close()
        except Exception:  # noqa: BLE001 - discarding a failed attempt must not hide its error
            pass

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


class PostgresParticipant(Participant):
    """The load's tables in one Postgres database: one prepared transaction covers them all."""

    kind = NAME
    commit_may_fail = False  # COMMIT PREPARED of a prepared transaction cannot fail for good

    def __init__(self, dsn: str, targets, load_id: str, name: str = NAME):
        self.dsn = self.endpoint = dsn
        self.load_id, self.name = load_id, name
        self.tables: list[PostgresTarget] = [targets] if isinstance(targets, PostgresTarget) else list(targets)
        self.targets = tuple(t.table for t in self.tables)
        self.gid = ids.pg_gid(load_id, name)
        # The first table's staging keeps the name it had when a load had one table.
        self.staging = {t.table: f"{ids.STAGING_SCHEMA}.{ids.staging_table(load_id, t.table if i else '')}"
                        for i, t in enumerate(self.tables)}

    # -- stage ------------------------------------------------------------------------
    def stage(self, frames) -> Staging:
        """Make a fresh staging table per table of this load. Idempotent; discards earlier
        attempts.

        Fails with PostgresConfigError, before writing anything, when the server cannot
        prepare transactions or a table is missing or has no load_id column, and with
        SpecError when a table's frame lacks one of its columns.
        """
        with _autocommit(self.dsn) as cur:
            cur.execute("show max_prepared_transactions")
            if int(cur.fetchone()[0]) == 0:
                raise PostgresConfigError(
                    "the Postgres server has max_prepared_transactions = 0, so it cannot take part in a "
                    "two-phase commit: set max_prepared_transactions above the number of loads in flight "
                    "(postgresql.conf) and restart it. Nothing was written.")
            columns = {}
            for target in self.tables:
                columns[target.table] = table_columns = self.target_columns(cur, target)
                if target.frame not in frames:
                    raise SpecError(f"table {target.table} loads the job's frame {target.frame!r}, which the job "
                                    f"did not return (it returned {sorted(frames)})")
                missing = [c for c in table_columns if c not in frames[target.frame]]
                if missing:
                    raise SpecError(f"the DataFrame lacks columns the targets need: {missing} of table "
                                    f"{target.table}; it has {frames[target.frame]}")
            # A retried prepare: the earlier attempt may have prepared already (crash after PREPARE).
            _rollback_gid(cur, self.gid)
            cur.execute("create schema if not exists twophase")
            cur.execute(f"""create table if not exists {MARKERS} (
                gid text primary key, load_id text not null, rows bigint not null,
                deleted bigint not null, prepared_at timestamptz not null default now())""")
            cur.execute(f"create schema if not exists {ids.STAGING_SCHEMA}")
            for target in self.tables:
                staging = self.staging[target.table]
                cur.execute(f"drop table if exists {staging}")
                cur.execute(sql.SQL("create unlogged table {} (like {} including defaults)").format(
                    sql.SQL(staging), sql.Identifier(target.schema, target.relation)))
                cur.execute(f"alter table {staging} drop column load_id, add column {PART_COLUMN} int not null")
                cur.execute(f"comment on table {staging} is %s", (self.load_id,))
        writers = {t.table: PostgresWriter(self.dsn, self.staging[t.table], columns[t.table], t.table)
                   for t in self.tables}
        return Staging(writers, frames={t.table: t.frame for t in self.tables})

    @staticmethod
    def target_columns(cur, target: PostgresTarget) -> list[str]:
        """The table's columns in table order, without load_id; checks the table exists."""
        cur.execute("""select column_name from information_schema.columns
                       where table_schema = %s and table_name = %s order by ordinal_position""",
                    (target.schema, target.relation))
        columns = [r[0] for r in cur.fetchall()]
        if not columns:
            raise PostgresConfigError(f"target table {target.table} does not exist: create it first "
                                      "(with a load_id text column)")
        if "load_id" not in columns:
            raise PostgresConfigError(f"target table {target.table} has no load_id column: "
                                      "add `load_id text not null`")
        for column in target.replace_where:
            if column not in columns:
                raise SpecError(f"replace_where column {column!r} is not a column of {target.table}")
        return [c for c in columns if c != "load_id"]

    # -- prepare ------------------------------------------------------------------------
    def prepare(self, marks: dict, reports, expected) -> Vote:
        """Promote every table's staging into it inside one prepared transaction; vote.

        Votes no (still prepared, so abort can discard it) when a table's promoted row
        count differs from what Spark staged for it.
        """
        conn = _connect(self.dsn)
        counts, deleted = {}, {}
        try:
            with servers(pg_dsn=self.dsn), conn.cursor() as cur:
                cur.execute("begin")
                for target in self.tables:
                    counts[target.table], deleted[target.table] = self._promote(cur, target)
                cur.execute(f"insert into {MARKERS} (gid, load_id, rows, deleted) values (%s, %s, %s, %s)",
                            (self.gid, self.load_id, sum(counts.values()), sum(deleted.values())))
                # Staging is dropped after COMMIT PREPARED (clean_up), not in here: a dropped
                # table's files are unlinked by the commit, which made COMMIT PREPARED grow
                # with the load (105 ms at 5M rows; 0.2 ms without the drop).
                failpoints.hit("pg.before_prepare")
                cur.execute("prepare transaction %s", (self.gid,))
                failpoints.hit("pg.after_prepare")
        finally:
            conn.close()
        first = self.tables[0]
        committable = {"gid": self.gid, "table": first.table, "mode": first.mode, "deleted": sum(deleted.values()),
                       "tables": {t: {"rows": counts[t], "deleted": deleted[t]} for t in counts}}
        summary = f"prepared transaction {self.gid}: " + ", ".join(
            f"{n} rows for {t}" + (f" replacing {deleted[t]}" if deleted[t] else "") for t, n in counts.items())
        wrong = [f"promoted {n} rows into {t} but Spark staged {expected.get(t)}"
                 for t, n in counts.items() if n != expected.get(t)]
        return Vote(self.name, not wrong, sum(counts.values()), committable, "; ".join(wrong), counts, summary)

    def _promote(self, cur, target: PostgresTarget) -> tuple[int, int]:
        """Delete the replaced rows (mode replace) and insert the table's staged rows with
        the load id; (rows inserted, rows deleted)."""
        columns = self.target_columns(cur, target)
        deleted = 0
        if target.mode == "replace":
            where = sql.SQL(" and ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in target.replace_where)
            cur.execute(sql.SQL("delete from {} where ").format(sql.Identifier(target.schema, target.relation))
                        + where, list(target.replace_where.values()))
            deleted = cur.rowcount
        column_list = sql.SQL(", ").join(map(sql.Identifier, columns))
        cur.execute(sql.SQL("insert into {} ({}, load_id) select {}, %s from {}").format(
            sql.Identifier(target.schema, target.relation), column_list, column_list,
            sql.SQL(self.staging[target.table])), (self.load_id,))
        return cur.rowcount, deleted

    def check(self, vote: Vote) -> str:
        gid = vote.committable["gid"]
        return "" if is_prepared(self.dsn, gid) else f"the prepared Postgres transaction {gid} does not exist"

    # -- commit / abort -----------------------------------------------------------------
    def commit(self, vote: Vote | None = None) -> Outcome:
        """COMMIT PREPARED. Handles: done now; done before (marker visible); the prepared
        transaction gone without its marker (rolled back outside the protocol, or by an
        abort: FAILED); a lock or a conflict (RETRY_LATER); server down (ServerUnreachable,
        which outcome_of makes RETRY_LATER)."""
        try:
            with _autocommit(self.dsn) as cur:
                try:
                    cur.execute("commit prepared %s", (self.gid,))
                except psycopg2.errors.UndefinedObject:
                    marker = self._marker(cur)
                    if marker is not None:
                        return Outcome(self.name, Kind.ALREADY_DONE, counts={"rows": marker[0], "deleted": marker[1]})
                    return Outcome(self.name, Kind.FAILED, (
                        f"prepared transaction {self.gid} no longer exists and was not committed: it was "
                        "rolled back (by an abort, or outside the protocol: ROLLBACK PREPARED by an operator?), "
                        "so its rows are lost"))
                marker = self._marker(cur)
            failpoints.hit("pg.committed")
            return Outcome(self.name, Kind.DONE, counts={"rows": marker[0], "deleted": marker[1]} if marker else {})
        except psycopg2.OperationalError as exc:  # a lock or a conflict
            return Outcome(self.name, Kind.RETRY_LATER, one_line(str(exc)))

    def clean_up(self, vote: Vote | None = None) -> str:
        """After the commit: drop the staging tables. '' when done, else why one was left
        (recovery's orphan sweep drops it later); never raises, the load is committed."""
        left = []
        for staging in self.staging.values():
            try:
                drop_staging_table(self.dsn, staging.split(".", 1)[1])
            except (psycopg2.Error, ServerUnreachable) as exc:
                left.append(one_line(f"staging table {staging} left for recovery: {exc}"))
        return "; ".join(left)

    def abort(self, vote: Vote | None = None) -> Outcome:
        """ROLLBACK PREPARED and drop staging. Handles: prepared (rolled back now); never
        prepared or rolled back before (ALREADY_DONE, staging dropped if left); committed
        already (FAILED: cannot be undone); a lock (RETRY_LATER).
        `vote`, when the load got that far, gives the count of prepared rows discarded."""
        try:
            with _autocommit(self.dsn) as cur:
                if self._marker(cur) is not None:
                    return Outcome(self.name, Kind.FAILED, f"{self.gid} is already committed; it cannot be rolled back")
                discarded = _rollback_gid(cur, self.gid)
                staged = [n for n in (self._drop_staging(cur, s) for s in self.staging.values()) if n is not None]
        except psycopg2.OperationalError as exc:  # a lock or a conflict
            return Outcome(self.name, Kind.RETRY_LATER, one_line(str(exc)))
        counts = {"prepared_transaction": "rolled back" if discarded else "none",
                  "staged_rows_dropped": sum(staged)}
        if discarded and vote is not None:
            counts["prepared_rows_discarded"] = vote.count
        done = discarded or bool(staged)
        return Outcome(self.name, Kind.DONE if done else Kind.ALREADY_DONE, counts=counts)

    def unreachable(self, exc: BaseException) -> ServerUnreachable | None:
        return postgres_unreachable(self.dsn, exc)

    # -- readers and recovery -------------------------------------------------------------
    def visible(self, load_ids: list[str]) -> dict[str, dict[str, int]]:
        """Rows of each load in each table, as any reader (read committed) counts them."""
        seen: dict[str, dict[str, int]] = {lid: {} for lid in load_ids}
        with _autocommit(self.dsn) as cur:
            for target in self.tables:
                found: dict[str, int] = {}
                cur.execute("select to_regclass(%s)", (target.table,))
                if cur.fetchone()[0] is not None:
                    cur.execute(sql.SQL("select load_id, count(*) from {} where load_id = any(%s) group by load_id")
                                .format(sql.Identifier(target.schema, target.relation)), (list(load_ids),))
                    found = dict(cur.fetchall())
                for lid in load_ids:
                    seen[lid][target.table] = found.get(lid, 0)
        return seen

    @classmethod
    def sweep(cls, dsn: str, state_of) -> list[Swept]:
        """Prepared transactions (gid prefix `twophase:`) of loads that are unknown or
        ABORTED are rolled back; staging tables of loads unknown or ended are dropped."""
        from ..states import TERMINAL, State

        gids = prepared_gids(dsn)
        tables = staging_tables(dsn)
        states = state_of({ids.load_id_of_gid(g) for g in gids} | set(tables.values()))
        swept = []
        for gid in gids:
            lid = ids.load_id_of_gid(gid)
            state = states.get(lid)
            if (state is None or state == State.ABORTED) and rollback_gid(dsn, gid):
                swept.append(Swept(lid, "orphan prepared transaction rolled back",
                                   f"{gid}; load {'unknown' if state is None else state}"))
        for table, lid in tables.items():
            state = states.get(lid)
            if state is None or state in TERMINAL:
                drop_staging_table(dsn, table)
                swept.append(Swept(lid or "?", "orphan staging table dropped",
                                   f"{ids.STAGING_SCHEMA}.{table}; load {'unknown' if state is None else state}"))
        return swept

    # -- helpers ------------------------------------------------------------------------
    def _marker(self, cur) -> tuple[int, int] | None:
        cur.execute("select to_regclass(%s)", (MARKERS,))
        if cur.fetchone()[0] is None:
            return None
        cur.execute(f"select rows, deleted from {MARKERS} where gid = %s", (self.gid,))
        return cur.fetchone()

    @staticmethod
    def _drop_staging(cur, staging: str) -> int | None:
        cur.execute("select to_regclass(%s)", (staging,))
        if cur.fetchone()[0] is None:
            return None
        cur.execute(f"select count(*) from {staging}")
        staged = cur.fetchone()[0]
        cur.execute(f"drop table {staging}")
        return staged
