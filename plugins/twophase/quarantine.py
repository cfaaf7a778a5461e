"""The quarantine: a load's rejected input lines, and the staged rows failing an audit
rule, kept where people can query them.

Table `twophase.quarantine` of the log's database, one row per kept line: the load, its
reason, where it came from (`source`: the file), what is wrong with it
(`detail`) and the line itself (`content`). At most `cap` lines per reason are kept per
load (default 10,000; the job's metrics count them all); a NUL character, which Postgres
text cannot hold, is kept as the four characters `\\x00`. Recovery deletes entries older
than the retention (default 7 days).

    capped(rejects_df, cap)               the first `cap` lines of each reason, from a Spark frame
    keep(dsn, load_id, lines)             the prepare job, before it stages (replaces the load's)
    keep(dsn, load_id, rows, reasons)     the audit: rows failing its rules (reason: the rule)
    kept(dsn, load_id, limit)             what `python -m twophase show LOAD --rejected` prints
    sweep(dsn, older_than)                recovery's retention sweep
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg2.extras

from .errors import SpecError, servers

DEFAULT_CAP = 10_000
DEFAULT_RETENTION = timedelta(days=7)
COLUMNS = ("reason", "source", "detail", "content")  # the rejects frame's columns; only `reason` is required


@dataclass(frozen=True)
class Kept:
    reason: str
    source: str | None
    detail: str | None
    content: str | None
    kept_at: datetime | None = None

    def describe(self) -> str:
        """One line: where, why, and the line itself (shortened)."""
        content = self.content if self.content is None or len(self.content) <= 200 else self.content[:200] + "..."
        return (f"{self.source or '?'}: {self.reason}" + (f" ({self.detail})" if self.detail else "")
                + (f": {content!r}" if content is not None else ""))


def capped(rejects, cap: int = DEFAULT_CAP) -> list[Kept]:
    """The first `cap` lines of each reason of a Spark DataFrame of rejects (columns
    `reason` and any of source, detail, content), collected to the driver in one job."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if cap < 0:
        raise SpecError(f"the quarantine's cap must be 0 or more lines per reason, not {cap}")
    if "reason" not in rejects.columns:
        raise SpecError(f"the job's rejects frame needs a 'reason' column; it has {rejects.columns}")
    columns = [F.col(c).cast("string").alias(c) if c in rejects.columns else F.lit(None).cast("string").alias(c)
               for c in COLUMNS]
    order = F.col("source") if "source" in rejects.columns else F.lit(1)
    numbered = rejects.select(*columns).withColumn(
        "n", F.row_number().over(Window.partitionBy("reason").orderBy(order)))
    return [Kept(*(r[c] for c in COLUMNS)) for r in numbered.where(F.col("n") <= cap).drop("n").collect()]


def _text(value: str | None) -> str | None:
    return None if value is None else value.replace("\x00", "\\x00")


def keep(dsn: str, load_id: str, lines: list[Kept], reasons: list[str] | None = None) -> int:
    """Replace the load's quarantine with `lines` (a retried prepare keeps them once), or
    only its entries of `reasons` (a retried audit replaces its rules' rows); returns how
    many were kept."""
    with _cursor(dsn) as cur:
        cur.execute("delete from twophase.quarantine where load_id = %s and (%s::text[] is null or "
                    "reason = any(%s::text[]))", (load_id, reasons, reasons))
        psycopg2.extras.execute_values(
            cur, "insert into twophase.quarantine (load_id, reason, source, detail, content) values %s",
            [(load_id, _text(k.reason) or "", _text(k.source), _text(k.detail), _text(k.content)) for k in lines],
            page_size=1000)
    return len(lines)


def kept(dsn: str, load_id: str, limit: int | None = None) -> list[Kept]:
    """The load's kept lines, by reason, in the order they were kept (at most `limit`)."""
    with _cursor(dsn, readonly=True) as cur:
        cur.execute("select reason, source, detail, content, kept_at from twophase.quarantine where load_id = %s "
                    "order by reason, id limit %s", (load_id, limit))
        return [Kept(*row) for row in cur.fetchall()]


def sweep(dsn: str, older_than: timedelta = DEFAULT_RETENTION, pipeline: str | None = None) -> int:
    """Delete entries kept longer ago than `older_than` (only those of `pipeline`'s loads,
    whose ids begin with its name and a dot, when given); returns how many."""
    with _cursor(dsn) as cur:
        if pipeline is None:
            cur.execute("delete from twophase.quarantine where kept_at < now() - %s", (older_than,))
        else:
            prefix = pipeline + "."
            cur.execute("delete from twophase.quarantine where kept_at < now() - %s and left(load_id, %s) = %s",
                        (older_than, len(prefix), prefix))
        return cur.rowcount


@contextmanager
def _cursor(dsn: str, readonly: bool = False):
    """A cursor on the log's database: a write commits when the block ends; the server down
    is one line (ServerUnreachable)."""
    with servers(pg_dsn=dsn):
        conn = psycopg2.connect(dsn)
    try:
        if readonly:
            conn.set_session(readonly=True, autocommit=True)
        with conn, conn.cursor() as cur:
            yield cur
    finally:
        conn.close()
