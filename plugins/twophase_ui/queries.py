"""What the Transactions page reads from the transaction log (schema twophase), read-only.

The list is one query (loads and their participants' vote counts), so a page of 200
loads costs one round trip; a load's detail goes through TransactionLog like the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg2
import psycopg2.extras

from twophase.log import Load, Transition, TransactionLog, UnknownLoad
from twophase.votes import Vote

DEFAULT_LIMIT = 200
MAX_LIMIT = 2000

_LIST = """
    select l.load_id, l.pipeline, l.run_id, l.state, l.decision, l.reason, l.data_interval_start,
           l.began_at, l.prepared_at, l.decided_at, l.finished_at,
           pg.count as rows, kafka.count as records
    from twophase.loads l
    left join twophase.votes pg on pg.load_id = l.load_id and pg.participant = 'postgres'
    left join twophase.votes kafka on kafka.load_id = l.load_id and kafka.participant = 'kafka'
    where (%(pipeline)s::text is null or l.pipeline = %(pipeline)s)
      and (%(state)s::text is null or l.state = %(state)s)
    order by l.began_at desc, l.load_id
    limit %(limit)s
"""


def seconds(a: datetime | None, b: datetime | None) -> float | None:
    """A phase's duration, as `python -m twophase status` computes it."""
    return round((b - a).total_seconds(), 3) if a and b else None


@dataclass(frozen=True)
class LoadRow:
    """One line of the list: the load, its counts and its phase timings."""

    load_id: str
    pipeline: str
    run_id: str
    state: str
    decision: str | None
    reason: str | None
    data_interval_start: datetime | None
    began_at: datetime
    prepared_at: datetime | None
    decided_at: datetime | None
    finished_at: datetime | None
    rows: int | None      # Postgres rows the participant voted with
    records: int | None   # Kafka records the participant voted with

    @property
    def prepare_s(self) -> float | None:
        return seconds(self.began_at, self.prepared_at)

    @property
    def vote_s(self) -> float | None:
        return seconds(self.prepared_at, self.decided_at)

    @property
    def phase2_s(self) -> float | None:
        return seconds(self.decided_at, self.finished_at)


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
               limit: int = DEFAULT_LIMIT) -> list[LoadRow]:
    """The newest loads first; none while the log's schema does not exist yet."""
    conn = _connect(dsn)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            if not _log_exists(cur):
                return []
            cur.execute(_LIST, {"pipeline": pipeline, "state": state, "limit": limit})
            return [LoadRow(**r) for r in cur.fetchall()]
    finally:
        conn.close()


def pipelines(dsn: str) -> list[str]:
    """Every pipeline in the log, for the filter."""
    conn = _connect(dsn)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            if not _log_exists(cur):
                return []
            cur.execute("select distinct pipeline from twophase.loads order by pipeline")
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
    log = TransactionLog(dsn)
    return LoadDetail(log.get(load_id), log.votes(load_id), log.history(load_id))
