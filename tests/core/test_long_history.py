"""A long history stays cheap: 50,000 loads in the log (an hourly pipeline's five and a
half years) and the summaries of the newest 2,000 still come back in well under 2 s.

The loads are written straight into the log with one `insert ... select generate_series`
per table, under a pipeline name of this module only, and deleted at the end. Each load
has two participants with one target each; every 7th a third participant with two
targets; every 10th load's votes are of the old form (no per-target counts), which
summaries show under the participant's name. The CLI runs as a subprocess, so its time
includes Python's start, as a person at a shell sees it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import psycopg2
import pytest

from twophase.report import summaries
from twophase.verify import verify

LOADS = 50_000
PAGE = 2_000
STATUS_BUDGET_S = 2.0
PAGE_BUDGET_S = 2.0  # as status: the budget of the issue (a few tenths of a second here)


def _n(i: int) -> int:
    return i % 997 + 1


def _aborted(i: int) -> bool:
    return i % 100 == 0


def _expected_counts(pipeline: str, i: int) -> dict[str, int]:
    """What summaries must say load i staged, per target."""
    n = _n(i)
    if i % 10 == 0:  # old-form votes: one count per participant
        counts = {"postgres": n, "kafka": n}
    else:
        counts = {f"long_history.{pipeline}": n, f"lh-{pipeline}": n}
    if i % 7 == 0:
        counts.update({"wh.orders": n, "wh.days": 1})
    return counts


@pytest.fixture(scope="module")
def history(pg_dsn, txlog):
    """(pipeline, seconds it took to write the loads)."""
    pipeline = f"long_history_{uuid.uuid4().hex[:8]}"
    table, topic = f"long_history.{pipeline}", f"lh-{pipeline}"
    participants = {"postgres": {"table": table, "mode": "append", "replace_where": {}},
                    "kafka": {"topic": topic, "key_column": "customer_id", "partitions": 3}}
    params = {"p": pipeline, "n": LOADS, "participants": json.dumps(participants), "table": table, "topic": topic}
    started = time.monotonic()
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("""
            insert into twophase.loads (load_id, pipeline, run_id, data_interval_start, data_interval_end, state,
                decision, reason, participants, input, expected_rows, expected, began_at, prepared_at, decided_at,
                finished_at, updated_at)
            select %(p)s || '__' || lpad(i::text, 5, '0'), %(p)s, 'scheduled__' || i,
                   t0 + i * interval '1 hour', t0 + (i + 1) * interval '1 hour',
                   case when i %% 100 = 0 then 'ABORTED' else 'COMMITTED' end,
                   case when i %% 100 = 0 then 'ABORT' else 'COMMIT' end,
                   case when i %% 100 = 0 then 'quality gate: too many rejected lines' end,
                   %(participants)s::jsonb, '{}', i %% 997 + 1,
                   case when i %% 10 <> 0 then jsonb_build_object(%(table)s, i %% 997 + 1, %(topic)s, i %% 997 + 1) end,
                   t0 + i * interval '1 hour' + interval '5 minutes',
                   t0 + i * interval '1 hour' + interval '5 minutes 30 seconds',
                   t0 + i * interval '1 hour' + interval '5 minutes 31 seconds',
                   t0 + i * interval '1 hour' + interval '5 minutes 33 seconds',
                   t0 + i * interval '1 hour' + interval '5 minutes 33 seconds'
            from generate_series(1, %(n)s) i, (select timestamptz '2021-01-01 00:00+00' as t0) t""", params)
        cur.execute("""
            insert into twophase.votes (load_id, participant, yes, count, detail, reason, counts, summary)
            select %(p)s || '__' || lpad(i::text, 5, '0'), v.participant, true, i %% 997 + 1, '{}', '',
                   case when i %% 10 <> 0 then jsonb_build_object(v.target, i %% 997 + 1) end,
                   case when i %% 10 <> 0 then (i %% 997 + 1) || ' staged for ' || v.target else '' end
            from generate_series(1, %(n)s) i,
                 (values ('postgres', %(table)s), ('kafka', %(topic)s)) v (participant, target)""", params)
        cur.execute("""
            insert into twophase.votes (load_id, participant, yes, count, detail, reason, counts, summary)
            select %(p)s || '__' || lpad(i::text, 5, '0'), 'warehouse', true, i %% 997 + 2, '{}', '',
                   jsonb_build_object('wh.orders', i %% 997 + 1, 'wh.days', 1), 'two tables'
            from generate_series(7, %(n)s, 7) i""", params)
        cur.execute("analyze twophase.loads; analyze twophase.votes")
    written = time.monotonic() - started
    try:
        yield pipeline, written
    finally:
        with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
            mine = "select load_id from twophase.loads where pipeline = %s"
            cur.execute(f"delete from twophase.transitions where load_id in ({mine})", (pipeline,))
            cur.execute(f"delete from twophase.votes where load_id in ({mine})", (pipeline,))
            cur.execute("delete from twophase.loads where pipeline = %s", (pipeline,))


def _check(pipeline: str, listed: list[dict]) -> None:
    """The newest PAGE loads, newest first, each with its own counts."""
    assert len(listed) == PAGE
    newest = range(LOADS, LOADS - PAGE, -1)
    assert [s["load_id"] for s in listed] == [f"{pipeline}__{i:05d}" for i in newest]
    for i, s in zip(newest, listed):
        assert s["counts"] == _expected_counts(pipeline, i), s
        assert s["state"] == ("ABORTED" if _aborted(i) else "COMMITTED")
        assert (s["prepare_s"], s["vote_s"], s["phase2_s"]) == (30.0, 1.0, 2.0)
    i = LOADS - LOADS % 70  # old-form votes, and a third participant
    sample = listed[LOADS - i]
    assert sample["load_id"] == f"{pipeline}__{i:05d}"
    assert sample["votes"]["postgres"] == {"yes": True, "count": _n(i), "reason": "",
                                           "counts": {"postgres": _n(i)}, "summary": ""}
    assert sample["votes"]["warehouse"]["counts"] == {"wh.orders": _n(i), "wh.days": 1}
    assert listed[1]["votes"]["postgres"]["summary"] == f"{_n(LOADS - 1)} staged for long_history.{pipeline}"


def test_status_json_of_2000_loads_answers_in_under_2_s(history):
    pipeline, written = history
    print(f"\nlong history: {LOADS:,} loads with their votes written in {written:.2f} s")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "twophase", "status", "--json", "--limit", str(PAGE),
                           "--pipeline", pipeline], capture_output=True, text=True, timeout=120, env=os.environ)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    print(f"status --json --limit {PAGE}: {took:.2f} s (subprocess wall time)")
    _check(pipeline, json.loads(proc.stdout))
    assert took < STATUS_BUDGET_S, f"status --json --limit {PAGE} took {took:.2f} s"


def test_the_pages_list_of_2000_loads_is_cheap(history, pg_dsn):
    from twophase_ui import queries

    pipeline, _ = history
    queries.list_loads(pg_dsn, pipeline, None, 1)  # imports and the first connection out of the timing
    started = time.monotonic()
    listed = queries.list_loads(pg_dsn, pipeline, None, PAGE)
    took = time.monotonic() - started
    print(f"\nthe Transactions page's list of {PAGE}: {took:.3f} s")
    _check(pipeline, [s.to_json() for s in listed])
    assert took < PAGE_BUDGET_S, f"listing {PAGE} loads took {took:.2f} s"

    started = time.monotonic()
    aborted = queries.list_loads(pg_dsn, pipeline, "ABORTED", PAGE)
    names = queries.pipelines(pg_dsn)
    took = time.monotonic() - started
    assert len(aborted) == LOADS // 100 and all(s.state == "ABORTED" for s in aborted)
    assert aborted[0].reason == "quality gate: too many rejected lines"
    assert pipeline in names
    assert took < PAGE_BUDGET_S, f"the ABORTED filter and the pipelines list took {took:.2f} s"


def test_summaries_cost_two_queries_whatever_the_page(history, pg_dsn, monkeypatch):
    """No query per load: the number of statements is the same for 1 load and for 2,000."""
    import psycopg2.extras

    pipeline, _ = history
    executed: list[str] = []
    real = psycopg2.extras.RealDictCursor.execute

    def counting(self, query, vars=None):
        executed.append(query)
        return real(self, query, vars)

    monkeypatch.setattr(psycopg2.extras.RealDictCursor, "execute", counting)
    per_page = {}
    for limit in (1, PAGE):
        executed.clear()
        assert len(summaries(pg_dsn, limit, pipeline=pipeline)) == limit
        per_page[limit] = len(executed)
    assert per_page[1] == per_page[PAGE] <= 2, per_page  # the schema check, then the loads and their votes


@pytest.mark.slow  # 46 to 99 s here today (the issue: 62 s): verify._replaced_later parses a spec per pair of loads
def test_verify_of_2000_loads(history, txlog, conns):
    """Measured, not held to a budget here: verify reads the targets (none exist for these
    loads: every committed one is a finding), and its own speed is verify.py's."""
    pipeline, _ = history
    loads = txlog.recent(PAGE, pipeline)
    started = time.monotonic()
    findings = verify(txlog, conns, loads)
    took = time.monotonic() - started
    print(f"\nverify of {PAGE} loads: {took:.2f} s")
    assert len(findings) == PAGE
    assert all(f.ok for f in findings if f.state == "ABORTED")
