"""What the Transactions page reads from the transaction log (schema twophase), read-only.

The list is twophase.ops.report.summaries, as `python -m twophase status`: two queries (the
loads, then all their votes) whatever the page's size; a load's detail goes through
TransactionLog like the CLI's `show`.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg2
import psycopg2.extras

from twophase.log import Load, PostgresLog, TransactionLog, Transition, UnknownLoad
from twophase.ops.report import LoadSummary, seconds, summaries
from twophase.protocol.votes import Vote

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "LoadDetail", "LoadSummary", "list_loads", "load_detail", "pipelines",
           "seconds"]

DEFAULT_LIMIT = 200
MAX_LIMIT = 2000

# Each distinct pipeline by a walk down the index on (pipeline, ...): a step per pipeline,
# however many loads each has.
_PIPELINES = """
    with recursive p as (
        (select pipeline from twophase.loads order by pipeline limit 1)
        union all
        select (select l.pipeline from twophase.loads l where l.pipeline > p.pipeline order by l.pipeline limit 1)
        from p where p.pipeline is not null
    )
    select pipeline from p where pipeline is not null
"""


@dataclass(frozen=True)
class LoadDetail:
    load: Load
    votes: dict[str, Vote]
    history: list[Transition]


def _connect(dsn: str):
    conn = psycopg2.connect(dsn)
    conn.set_session(readonly=True, autocommit=True)
    return conn


def _log_exists(cur) -> bool:
    cur.execute("select to_regclass('twophase.loads') is not null as ok")
    return cur.fetchone()["ok"]


def list_loads(dsn: str, pipeline: str | None = None, state: str | None = None,
               limit: int = DEFAULT_LIMIT) -> list[LoadSummary]:
    """The newest loads first; none while the log's schema does not exist yet."""
    return summaries(dsn, limit, pipeline=pipeline, state=state)


def pipelines(dsn: str) -> list[str]:
    """Every pipeline in the log, for the filter."""
    conn = _connect(dsn)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            if not _log_exists(cur):
                return []
            cur.execute(_PIPELINES)
            return [r["pipeline"] for r in cur.fetchall()]
    finally:
        conn.close()


def load_detail(dsn: str, load_id: str) -> LoadDetail:
    """The load, its votes and its transition history; UnknownLoad if there is none."""
    conn = _connect(dsn)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            if not _log_exists(cur):
                raise UnknownLoad(f"no load {load_id!r}: the transaction log is empty")
    finally:
        conn.close()
    log = PostgresLog(dsn)
    return LoadDetail(log.get(load_id), log.votes(load_id), log.history(load_id))
