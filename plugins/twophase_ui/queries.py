"""What the Transactions pages read from the transaction log (schema twophase), read-only.

The list is twophase.ops.report.summaries, as `python -m twophase status`: two queries (the
loads, then all their votes) whatever the page's size; a load's detail goes through
TransactionLog like the CLI's `show`, plus the first rejected lines of each reason; a
pipeline's page reads its newest loads (summaries again, and their rejected shares) and
its loads not finished. Every query walks an index: the log's length does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import psycopg2
import psycopg2.extras

from twophase.gates.quarantine import Kept
from twophase.log import Load, PostgresLog, Transition, UnknownLoad
from twophase.ops.report import LoadSummary, seconds, summaries
from twophase.protocol.votes import Vote

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "LoadDetail", "LoadSummary", "PipelineLoads", "Rejected", "list_loads",
           "dag_of", "load_detail", "pipeline_loads", "pipelines", "seconds"]

DEFAULT_LIMIT = 200
MAX_LIMIT = 2000

# The DAG of a pipeline: the one that began its newest load (coordinator.begin keeps it one
# per pipeline); the pipeline's name for loads begun before the log kept it, or outside Airflow.
_DAG_OF = """
    coalesce((select l.participants ->> 'dag_id' from twophase.loads l where l.pipeline = {pipeline}
              order by l.began_at desc, l.load_id limit 1), {pipeline})
"""

# Each distinct pipeline by a walk down the index on (pipeline, ...): a step per pipeline,
# however many loads each has; and its DAG (loads_pipeline_recent: one index probe).
_PIPELINES = f"""
    with recursive p as (
        (select pipeline from twophase.loads order by pipeline limit 1)
        union all
        select (select l.pipeline from twophase.loads l where l.pipeline > p.pipeline order by l.pipeline limit 1)
        from p where p.pipeline is not null
    )
    select pipeline, {_DAG_OF.format(pipeline="p.pipeline")} as dag_id from p where pipeline is not null
"""


# Each reason of the load's quarantine by a walk down quarantine_load (load_id, reason, id),
# then its first lines and how many are kept: index scans, however many lines a load rejected.
_REJECTED = """
    with recursive r as (
        (select reason from twophase.quarantine where load_id = %(load_id)s order by reason limit 1)
        union all
        select (select q.reason from twophase.quarantine q where q.load_id = %(load_id)s and q.reason > r.reason
                order by q.reason limit 1)
        from r where r.reason is not null
    )
    select r.reason,
           (select count(*) from twophase.quarantine q where q.load_id = %(load_id)s and q.reason = r.reason) as kept,
           (select coalesce(json_agg(json_build_object('source', f.source, 'detail', f.detail, 'content', f.content)
                                     order by f.id), '[]')
            from (select id, source, detail, left(content, 500) as content from twophase.quarantine q
                  where q.load_id = %(load_id)s and q.reason = r.reason order by id limit %(examples)s) f) as first
    from r where r.reason is not null
"""

# What a page of loads' summaries leave out: their rejected lines and sources.
_EXTRA = """
    select load_id, source,
           case when jsonb_typeof(metrics -> 'input_lines') = 'number' then (metrics ->> 'input_lines')::numeric
           end as input_lines,
           case when jsonb_typeof(metrics -> 'rejected_lines') = 'number' then (metrics ->> 'rejected_lines')::numeric
           end as rejected_lines
    from twophase.loads where load_id = any(%(load_ids)s)
"""

EXAMPLES = 3  # rejected lines shown per reason


@dataclass(frozen=True)
class Rejected:
    """One reason of the load's quarantine: how many lines are kept, and the first ones."""

    reason: str
    kept: int
    first: list[Kept]


@dataclass(frozen=True)
class LoadDetail:
    load: Load
    votes: dict[str, Vote]
    history: list[Transition]
    rejected: list[Rejected] = field(default_factory=list)
    now: datetime | None = None  # the log server's clock when read: where a load not finished ends for now


@dataclass(frozen=True)
class PipelineLoads:
    """A pipeline's newest loads (newest first), their rejected lines and sources, its
    loads not finished (oldest first), and the log server's time when they were read."""

    recent: list[LoadSummary]
    input_lines: dict[str, float | None]
    rejected_lines: dict[str, float | None]
    sources: list[str]
    unfinished: list[Load]
    now: datetime


def _connect(dsn: str):
    conn = psycopg2.connect(dsn)
    conn.set_session(readonly=True, autocommit=True)
    return conn


def _log_exists(cur) -> bool:
    cur.execute("select to_regclass('twophase.loads') is not null as ok")
    return cur.fetchone()["ok"]


def list_loads(dsn: str, pipeline: str | None = None, state: str | None = None,
               limit: int = DEFAULT_LIMIT, among: list[str] | None = None) -> list[LoadSummary]:
    """The newest loads first (only of the pipelines `among`, when given); none while the
    log's schema does not exist yet."""
    return summaries(dsn, limit, pipeline=pipeline, state=state, pipelines=among)


def pipelines(dsn: str) -> dict[str, str]:
    """Every pipeline in the log (for the filter), with the DAG that loads it."""
    conn = _connect(dsn)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            if not _log_exists(cur):
                return {}
            cur.execute(_PIPELINES)
            return {r["pipeline"]: r["dag_id"] for r in cur.fetchall()}
    finally:
        conn.close()


def dag_of(dsn: str, pipeline: str) -> str:
    """The DAG that loads `pipeline` (its name, when the log knows no DAG of it)."""
    conn = _connect(dsn)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            if not _log_exists(cur):
                return pipeline
            cur.execute(f"select {_DAG_OF.format(pipeline='%(pipeline)s')} as dag_id", {"pipeline": pipeline})
            return cur.fetchone()["dag_id"]
    finally:
        conn.close()


def load_detail(dsn: str, load_id: str) -> LoadDetail:
    """The load, its votes, its transition history and the first of its rejected lines;
    UnknownLoad if there is none."""
    conn = _connect(dsn)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            if not _log_exists(cur):
                raise UnknownLoad(f"no load {load_id!r}: the transaction log is empty")
            cur.execute(_REJECTED, {"load_id": load_id, "examples": EXAMPLES})
            rejected = [Rejected(r["reason"], r["kept"], [Kept(reason=r["reason"], **k) for k in r["first"]])
                        for r in cur.fetchall()]
            cur.execute("select now() as now")
            now = cur.fetchone()["now"]
    finally:
        conn.close()
    log = PostgresLog(dsn)
    return LoadDetail(log.get(load_id), log.votes(load_id), log.history(load_id), rejected, now)


def pipeline_loads(dsn: str, pipeline: str, limit: int) -> PipelineLoads:
    """The pipeline's newest `limit` loads and its loads not finished."""
    recent = summaries(dsn, limit, pipeline=pipeline)
    conn = _connect(dsn)
    try:
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute("select now() as now")
            now = cur.fetchone()["now"]
            if not _log_exists(cur):
                return PipelineLoads([], {}, {}, [], [], now)
            cur.execute(_EXTRA, {"load_ids": [r.load_id for r in recent]})
            extra = {r["load_id"]: r for r in cur.fetchall()}
    finally:
        conn.close()
    unfinished = PostgresLog(dsn).unresolved(pipeline)
    number = lambda v: None if v is None else float(v)  # noqa: E731
    return PipelineLoads(recent, {k: number(r["input_lines"]) for k, r in extra.items()},
                         {k: number(r["rejected_lines"]) for k, r in extra.items()},
                         list(dict.fromkeys(extra[r.load_id]["source"] for r in recent
                                            if r.load_id in extra and extra[r.load_id]["source"])),
                         unfinished, now)
