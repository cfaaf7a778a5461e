"""The executor side: PostgresWriter COPYs one Spark partition's rows into staging."""

from __future__ import annotations

import io
import queue
import re
import threading
from urllib.parse import quote

import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg2 import sql

from ...errors import one_line
from ...server_errors import servers
from ..contract import NotInJvm, PartitionWriter, jvm_type
from .server import PART_COLUMN, _connect


class StagingRefused(ValueError):
    """Postgres refused a row of the load while staging it (COPY); nothing is visible."""



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


# libpq's connection settings that have a pgjdbc property of the same meaning.
_JDBC_PROPERTIES = {"user": "user", "password": "password", "sslmode": "sslmode", "sslrootcert": "sslrootcert",
                    "connect_timeout": "connectTimeout", "application_name": "ApplicationName", "options": "options"}


def jdbc_settings(dsn: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and properties of a libpq connection string, for pgjdbc; NotInJvm
    when it holds what has no plain JDBC form here (a socket folder, several hosts, a
    client certificate, a service file, a password left to ~/.pgpass)."""
    settings = psycopg2.extensions.parse_dsn(dsn)
    host, port, database = settings.pop("host", ""), settings.pop("port", "5432"), settings.pop("dbname", "")
    if not host or host.startswith("/") or "," in host or "," in port:
        raise NotInJvm("the Postgres connection names no single TCP host")
    unknown = sorted(set(settings) - set(_JDBC_PROPERTIES))
    if unknown:
        raise NotInJvm(f"the Postgres connection's settings {', '.join(unknown)} have no JDBC form here")
    if not database or "user" not in settings or "password" not in settings:
        raise NotInJvm("the Postgres connection leaves its database, user or password to libpq's defaults")
    host = f"[{host}]" if ":" in host else host
    return (f"jdbc:postgresql://{host}:{port}/{quote(database, safe='')}",
            {_JDBC_PROPERTIES[k]: v for k, v in settings.items()})


def _identifier(name: str) -> str:
    """A name quoted for Postgres, as psycopg2's sql.Identifier quotes it."""
    return '"' + name.replace('"', '""') + '"'


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

    def jvm_spec(self, fields: list[tuple[str, str]]) -> dict[str, str]:
        """The settings of StagingCopy (spark/jvm/StagingCopy.java): the same transaction,
        COPY and refusals as this writer's, for columns of the types it writes as CSV."""
        url, props = jdbc_settings(self.dsn)
        types = dict(fields)
        names = [name for name, _ in fields]
        kinds = []
        for column in self.columns:
            spark_type = types.get(column, "missing")
            # A wall-clock time is written as a UTC instant is, in the COPY's UTC session.
            kind = jvm_type("timestamp" if spark_type == "timestamp_ntz" else spark_type)
            if kind is None:
                raise NotInJvm(f"column {column} is {spark_type}, which the JVM's COPY does not write")
            kinds.append(kind)
        quoted = ", ".join(_identifier(c) for c in [*self.columns, PART_COLUMN])
        ordinals = ",".join(str(names.index(c)) for c in self.columns)
        return {"kind": "postgres", "url": url, **{f"prop.{k}": v for k, v in props.items()}, "lock": self.staging,
                "delete": f"delete from {self.staging} where {_identifier(PART_COLUMN)} = ?",
                "copy": f"copy {self.staging} ({quoted}) from stdin with (format csv)",
                "staging": self.staging, "target": self.target,
                "columns": ordinals, "types": ",".join(kinds), "reads": ordinals}

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
        return refusal(exc.diag.message_primary or str(exc).splitlines()[0], exc.diag.context or "", self._part,
                       self.staging, self.target)


def refusal(primary: str, context: str, part: int, staging: str, target: str) -> str:
    """What COPY refused, where, and what to do, in one line (Postgres' CONTEXT says
    'COPY <staging>, line N[, column C: "value"]'; line N is the partition's row N): the
    message of StagingRefused, from this writer or from its JVM form (spark/jvm_stage.py)."""
    line = re.search(r"line (\d+)", context)
    column = re.search(r"column (\w+)", context)
    where = (f"row {line.group(1) if line else '?'} of Spark partition {part}"
             + (f", column {column.group(1)}" if column else ""))
    if "0x00" in primary:
        problem = ("a text value holds a NUL character (U+0000), which Postgres cannot store in text: remove it "
                   "in the job, e.g. pyspark.sql.functions.translate(column, '\\x00', '')")
    else:
        problem = (f"{primary}: make the job's value fit the column "
                   f"(or change the column of {target or 'the target table'})")
    into = f" for {target}" if target else ""
    return one_line(f"Postgres refused {where} while staging into {staging}{into}: {problem}", 600)
