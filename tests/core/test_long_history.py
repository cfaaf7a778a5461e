"""A long history stays cheap: 50,000 loads in the log (an hourly pipeline's five and a
half years): the summaries of the newest 2,000 still come back in well under 2 s, verify
of 2,000 loads in well under the 62 s it took before issue 12, and begin and recover cost
what they cost with no history (measured side by side in the same test).

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
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg2
import pytest

from twophase.ids import load_id_for
from twophase.ops import recovery
from twophase.ops.report import summaries
from twophase.ops.verify import verify
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.spec import LoadSpec

LOADS = 50_000
PAGE = 2_000
STATUS_BUDGET_S = 2.0
PAGE_BUDGET_S = 2.0  # as status: the budget of the issue (a few tenths of a second here)
VERIFY_BUDGET_S = 20.0  # the issue: "well under 62 s" (the release before issue 12)
# The module runs alone (tests/parallel.py): its time budgets hold with no other test's work on
# the same cores.
pytestmark = pytest.mark.alone
FLAT = 3.0  # begin and recover with the long history: at most this many times the time with none
TIMES = 7  # timed calls of each, median taken


T0 = datetime(2021, 1, 1, tzinfo=timezone.utc)  # the history's first hour (load i covers hour i)


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


def test_verify_of_2000_loads_is_well_under_a_minute(history, txlog, conns):
    """verify reads the targets (none exist for these loads: every committed one is a
    finding, each naming what is missing)."""
    pipeline, _ = history
    loads = txlog.recent(PAGE, pipeline)
    started = time.monotonic()
    findings = verify(txlog, conns, loads)
    took = time.monotonic() - started
    print(f"\nverify of {PAGE} loads: {took:.2f} s")
    assert len(findings) == PAGE
    assert all(f.ok for f in findings if f.state == "ABORTED")
    assert not any(f.ok for f in findings if f.state == "COMMITTED"), "their targets do not exist"
    assert took < VERIFY_BUDGET_S, f"verify of {PAGE} loads took {took:.2f} s"


def _median_seconds(calls) -> float:
    took = []
    for call in calls:
        started = time.perf_counter()
        call()
        took.append(time.perf_counter() - started)
    return statistics.median(took)


def _hour_spec(pipeline: str, hour: int) -> LoadSpec:
    """A load of the hour `hour` after the history's first, into the history's targets."""
    start = T0 + timedelta(hours=hour)
    return LoadSpec(load_id=load_id_for(pipeline, f"flat_{hour}"), pipeline=pipeline, run_id=f"flat_{hour}",
                    targets=(PostgresTarget(f"long_history.{pipeline}"), KafkaTarget(f"lh-{pipeline}", "customer_id")),
                    data_interval=(start.isoformat(), (start + timedelta(hours=1)).isoformat()))


@pytest.fixture
def flat_loads(pg_dsn):
    """Deletes, after the test, the loads it began (their load ids contain 'flat_')."""
    yield
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        mine = "select load_id from twophase.loads where pipeline like 'long_history_%%' and run_id like 'flat_%%'"
        cur.execute(f"delete from twophase.transitions where load_id in ({mine})")
        cur.execute(f"delete from twophase.loads where load_id in ({mine})")


def test_begin_stays_flat(history, txlog, flat_loads):
    """begin of the next hour after 50,000 logged loads costs what it costs with none."""
    pipeline, _ = history
    empty = f"{pipeline}_empty"
    coordinator.begin(txlog, _hour_spec(empty, 0))  # the first connection and imports out of the timing
    with_none = _median_seconds(lambda h=h: coordinator.begin(txlog, _hour_spec(empty, h)) for h in range(1, TIMES + 1))
    with_history = _median_seconds(lambda h=h: coordinator.begin(txlog, _hour_spec(pipeline, LOADS + h))
                                   for h in range(1, TIMES + 1))
    print(f"\nbegin: {with_none * 1000:.1f} ms with no history, {with_history * 1000:.1f} ms with {LOADS:,} loads")
    assert txlog.get(_hour_spec(pipeline, LOADS + TIMES).load_id).state.value == "PREPARING"
    with pytest.raises(coordinator.AlreadyCommitted):  # the history is read: hour LOADS - 1 is committed
        coordinator.begin(txlog, _hour_spec(pipeline, LOADS - 1))
    assert with_history < FLAT * with_none + 0.01, (with_none, with_history)


def test_recover_stays_flat(history, txlog, conns, flat_loads):
    """recover of a pipeline with 50,000 finished loads (and one unresolved, younger than
    the deadline, which it leaves waiting) costs what recover of a pipeline with none costs."""
    pipeline, _ = history
    coordinator.begin(txlog, _hour_spec(pipeline, LOADS + 1))
    empty = f"{pipeline}_none"
    recovery.recover(txlog, conns, pipeline=empty)  # imports and first connections out of the timing
    with_none = _median_seconds(lambda: recovery.recover(txlog, conns, pipeline=empty) for _ in range(TIMES))
    actions: list = []
    with_history = _median_seconds(lambda: actions.append(recovery.recover(txlog, conns, pipeline=pipeline))
                                   for _ in range(TIMES))
    print(f"\nrecover: {with_none * 1000:.1f} ms with no history, {with_history * 1000:.1f} ms with {LOADS:,} loads")
    mine = [a for a in actions[-1] if a.load_id.startswith(pipeline)]
    assert [(a.load_id, a.action) for a in mine] == [(_hour_spec(pipeline, LOADS + 1).load_id, "waiting")]
    assert with_history < FLAT * with_none + 0.05, (with_none, with_history)
