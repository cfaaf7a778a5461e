"""Summaries of loads for people: the CLI's `status` and `show`, the Transactions page.

One function, `summaries`, builds them for a page of loads with a constant number of
queries on one read-only connection, whatever the page's size: one statement reads the
loads and all their votes. Counts are generic: per target ({target: n}, over every
participant of the load) and per participant; nothing here knows what kinds of
participants exist.
A vote logged before votes had per-target counts is shown under its participant's name
(Vote.counts_or_total).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable

import psycopg2
import psycopg2.extras

from ..protocol.votes import Vote
from ..server_errors import servers
from ..spec import last_resource_line

DEFAULT_LIMIT = 20

# One statement: the page of loads, then each load's votes by its primary key (an index
# lookup per load of the page, whatever the log's length). Not `detail`: what a
# participant's commit reads (offset ranges...) can be large, and no summary shows it.
_PAGE = """
    select l.*,
           (select coalesce(json_agg(json_build_object(
                       'participant', v.participant, 'yes', v.yes, 'count', v.count, 'reason', v.reason,
                       'counts', v.counts, 'summary', v.summary) order by v.participant), '[]')
            from twophase.votes v where v.load_id = l.load_id) as votes
    from (select load_id, pipeline, run_id, state, decision, reason, data_interval_start, data_interval_end,
                 expected, began_at, prepared_at, decided_at, finished_at, exposed_at,
                 participants -> 'last_resource' as last_resource, participants ->> 'dag_id' as dag_id
          from twophase.loads
          where (%(pipeline)s::text is null or pipeline = %(pipeline)s)
            and (%(pipelines)s::text[] is null or pipeline = any(%(pipelines)s::text[]))
            and (%(state)s::text is null or state = %(state)s)
            and (%(load_id)s::text is null or load_id = %(load_id)s)
          order by began_at desc, load_id
          limit %(limit)s) l
    order by l.began_at desc, l.load_id
"""


def seconds(a: datetime | None, b: datetime | None) -> float | None:
    """A phase's duration in seconds, or None while the phase has not ended."""
    return round((b - a).total_seconds(), 3) if a and b else None


@dataclass(frozen=True)
class VoteSummary:
    """One participant's vote: yes or no, what it staged per target, its one-line summary
    (Vote without what its commit reads)."""

    participant: str
    yes: bool
    count: int                  # over all its targets
    counts: dict[str, int]      # per target (an old vote: {participant: count})
    summary: str = ""
    reason: str = ""

    def to_json(self) -> dict:
        return {"yes": self.yes, "count": self.count, "counts": dict(self.counts), "summary": self.summary,
                "reason": self.reason}


@dataclass(frozen=True)
class LoadSummary:
    load_id: str
    pipeline: str
    run_id: str
    state: str
    decision: str | None
    reason: str | None
    data_interval_start: datetime | None
    data_interval_end: datetime | None
    began_at: datetime
    prepared_at: datetime | None
    decided_at: datetime | None
    finished_at: datetime | None
    expected: dict[str, int] | None = None      # Spark's rows per target (None: not prepared yet)
    votes: dict[str, VoteSummary] = field(default_factory=dict)  # by participant, sorted by name
    exposed_at: datetime | None = None  # the vote began making participants ready (None: never got there)
    last_resource: dict | None = None  # {participant, why}: it commits last (docs/adr/0011); None: all prepare
    dag_id: str | None = None  # the Airflow DAG that began it (LoadSpec.dag_id); None: not begun by one

    def describe_last_resource(self) -> str:
        """'' when every participant prepares."""
        return last_resource_line(self.last_resource["participant"], self.last_resource["why"]) \
            if self.last_resource else ""

    @property
    def counts(self) -> dict[str, int]:
        """What the load staged per target, over all its participants' votes (empty
        before any vote)."""
        merged: dict[str, int] = {}
        for p in self.votes.values():
            for target, n in p.counts.items():
                merged[target] = merged.get(target, 0) + n
        return merged

    @property
    def prepare_s(self) -> float | None:
        return seconds(self.began_at, self.prepared_at)

    @property
    def vote_s(self) -> float | None:
        return seconds(self.prepared_at, self.decided_at)

    @property
    def phase2_s(self) -> float | None:
        return seconds(self.decided_at, self.finished_at)

    @property
    def exposure_s(self) -> float | None:
        """The exposure window: from the vote making participants ready (the first lock,
        the prepared transaction) to the end of phase 2; None until both happened."""
        return seconds(self.exposed_at, self.finished_at)

    def describe_counts(self, fmt=str, sep: str = " · ") -> str:
        """One line: "analytics.customer_daily_totals 5000 · customer-daily-totals 5000"."""
        return sep.join(f"{target} {fmt(n)}" for target, n in self.counts.items())

    def to_json(self) -> dict:
        """The keys of `python -m twophase status --json` (and of the page's /api/loads)."""
        iso = lambda t: t.isoformat() if t else None  # noqa: E731
        return {
            "load_id": self.load_id, "pipeline": self.pipeline, "run_id": self.run_id, "state": self.state,
            "decision": self.decision, "reason": self.reason,
            "data_interval_start": iso(self.data_interval_start), "data_interval_end": iso(self.data_interval_end),
            "counts": self.counts, "expected": self.expected,
            "votes": {name: v.to_json() for name, v in self.votes.items()},
            "began_at": iso(self.began_at),
            "prepare_s": self.prepare_s, "vote_s": self.vote_s, "phase2_s": self.phase2_s,
            "exposed_at": iso(self.exposed_at), "exposure_s": self.exposure_s, "last_resource": self.last_resource,
            "dag_id": self.dag_id,
        }


def _vote(vote: Vote) -> VoteSummary:
    return VoteSummary(vote.participant, vote.yes, vote.count, vote.counts_or_total(), vote.summary,
                              vote.reason)


def summarize(row: dict, votes: Iterable[Vote]) -> LoadSummary:
    """A load's summary from its log row (a twophase.loads row, or Load.__dict__) and votes."""
    state = row["state"]
    return LoadSummary(
        load_id=row["load_id"], pipeline=row["pipeline"], run_id=row["run_id"],
        state=getattr(state, "value", state), decision=row["decision"], reason=row["reason"],
        data_interval_start=row["data_interval_start"], data_interval_end=row.get("data_interval_end"),
        began_at=row["began_at"], prepared_at=row["prepared_at"], decided_at=row["decided_at"],
        finished_at=row["finished_at"], expected=row.get("expected"), exposed_at=row.get("exposed_at"),
        last_resource=row["last_resource"] if "last_resource" in row else (row.get("participants") or {}).get(
            "last_resource"),
        votes={v.participant: _vote(v) for v in sorted(votes, key=lambda v: v.participant)},
        dag_id=row["dag_id"] if "dag_id" in row else (row.get("participants") or {}).get("dag_id"),
    )


def summaries(dsn: str, limit: int = DEFAULT_LIMIT, pipeline: str | None = None, state: str | None = None,
              load_id: str | None = None, pipelines: list[str] | None = None) -> list[LoadSummary]:
    """The newest loads first (at most `limit`), optionally of one pipeline, of a list of
    them (those a user may read), in one state, or only `load_id`; none while the log's
    schema does not exist yet. One statement (after the check that the log exists) on one
    read-only connection, whatever `limit` is."""
    with servers(pg_dsn=dsn):  # the log's server down: PostgresUnreachable, one line
        conn = psycopg2.connect(dsn)
    try:
        conn.set_session(readonly=True, autocommit=True)
        with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute("select to_regclass('twophase.loads') is not null as ok")
            if not cur.fetchone()["ok"]:
                return []
            cur.execute(_PAGE, {"pipeline": pipeline, "state": state, "load_id": load_id, "limit": limit,
                                "pipelines": pipelines})
            rows = cur.fetchall()
    finally:
        conn.close()
    return [summarize(r, [Vote(**{**v, "counts": v["counts"] or {}}) for v in r["votes"]]) for r in rows]
