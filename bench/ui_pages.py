"""How long the Transactions pages take to render with a long log (issue 29).

    python -m bench.ui_pages [--loads 50000] [--reps 5]

Needs the stack: scripts/stack up; eval "$(scripts/stack env)" (the page reads the log
through the Airflow connection twophase_postgres and checks logins with the stack's JWT
secret). A throwaway pipeline of `--loads` loads is written into the log directly (one
INSERT ... SELECT over generate_series per table: loads, two votes and four transitions
each, a few rejected lines kept for the newest; most committed, every 17th aborted, the
newest three not finished), beside whatever the log holds already; deleted at the end and
the tables vacuumed, so a run leaves the log as it found it. Then each page is
rendered by the plugin's FastAPI app through a TestClient, `--reps` times after one
untimed warm-up, as a logged-in viewer:

    list             /                            the newest 200 loads of every pipeline
    list, pipeline   /?pipeline=P                 the pipeline's newest 200
    load, newest     /loads/<newest load>         not finished: its timeline up to now
    load, oldest     /loads/<oldest load>         the other end of the pipeline's index
    pipeline         /pipelines/P                 its newest 30 loads charted, its loads not finished

Prints the log's size and each page's median and slowest milliseconds as a Markdown
table; the pipeline's rows are deleted at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

import psycopg2
from fastapi.testclient import TestClient

from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.spec import LoadSpec

# One statement per table; %(n)s loads named <pipeline>.run<i>, i = 1 (oldest) .. n, a
# minute apart and ending now; the newest three not finished.
_FILL = """
    insert into twophase.loads (load_id, pipeline, run_id, state, decision, reason, participants, expected,
                                metrics, began_at, prepared_at, exposed_at, decided_at, finished_at, outcomes)
    select %(pipeline)s || '.run' || i, %(pipeline)s, 'run' || i,
           case when i > %(n)s - 3 then (array['PREPARING', 'PREPARED', 'COMMITTING'])[i - %(n)s + 3]
                when i %% 17 = 0 then 'ABORTED' else 'COMMITTED' end,
           case when i > %(n)s - 2 and i = %(n)s then 'COMMIT' when i > %(n)s - 3 then null
                when i %% 17 = 0 then 'ABORT' else 'COMMIT' end,
           case when i %% 17 = 0 and i <= %(n)s - 3 then 'audit: row_count at error' end,
           %(participants)s::jsonb, %(expected)s::jsonb,
           jsonb_build_object('input_lines', 1000 + i %% 50, 'rejected_lines', i %% 50,
                              'rejected_by_reason', jsonb_build_object('not_json', i %% 50)),
           b, case when i <> %(n)s - 2 then b + interval '30 s' end,
           case when i <= %(n)s - 3 or i = %(n)s then b + interval '35 s' end,
           case when i <= %(n)s - 3 or i = %(n)s then b + interval '40 s' end,
           case when i <= %(n)s - 3 then b + interval '42 s' end,
           case when i <= %(n)s - 3 and i %% 17 <> 0 then %(outcomes)s::jsonb end
    from generate_series(1, %(n)s) i, lateral (select now() - (%(n)s - i) * interval '1 minute' as b) t;

    insert into twophase.votes (load_id, participant, yes, count, detail, counts, summary)
    select l.load_id, v.participant, true, 1000, v.detail, v.counts, 'staged 1000'
    from twophase.loads l, jsonb_to_recordset(%(votes)s::jsonb) as v(participant text, detail jsonb, counts jsonb)
    where l.pipeline = %(pipeline)s and l.prepared_at is not null;

    insert into twophase.transitions (load_id, from_state, to_state, at)
    select load_id, f, t, a from twophase.loads l, lateral (values
        (null, 'PREPARING', began_at), ('PREPARING', 'PREPARED', prepared_at),
        ('PREPARED', coalesce(case decision when 'COMMIT' then 'COMMITTING' else 'ABORTING' end, ''), decided_at),
        (case decision when 'COMMIT' then 'COMMITTING' else 'ABORTING' end, state, finished_at)) as x(f, t, a)
    where l.pipeline = %(pipeline)s and a is not null;

    insert into twophase.quarantine (load_id, reason, source, detail, content)
    select %(pipeline)s || '.run' || i, 'not_json', 'orders.jsonl', 'not JSON', '{"order_id": ' || k
    from generate_series(%(n)s - 9, %(n)s) i, generate_series(1, 20) k;
"""

_CLEAN = """
    delete from twophase.quarantine where load_id in (select load_id from twophase.loads where pipeline = %(p)s);
    delete from twophase.votes where load_id in (select load_id from twophase.loads where pipeline = %(p)s);
    delete from twophase.transitions where load_id in (select load_id from twophase.loads where pipeline = %(p)s);
    delete from twophase.loads where pipeline = %(p)s;
"""


def fill(dsn: str, pipeline: str, n: int) -> None:
    """The pipeline's `n` loads, written straight into the log (see the module's docstring)."""
    table, topic = f"bench.{pipeline}", pipeline.replace("_", "-")
    spec = LoadSpec(load_id=f"{pipeline}.run1", pipeline=pipeline, run_id="run1",
                    targets=(PostgresTarget(table), KafkaTarget(topic, key_column="customer_id")))
    votes = [{"participant": "postgres", "detail": {"gid": f"twophase:{pipeline}", "table": table, "mode": "append"},
              "counts": {table: 1000}},
             {"participant": "kafka", "detail": {"topics": [{"topic": topic, "staging_topic": f"{topic}.staging",
                                                             "ranges": {"0": [0, 999]}}]}, "counts": {topic: 1000}}]
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(_FILL, {"pipeline": pipeline, "n": n, "participants": json.dumps(spec.to_log()),
                            "expected": json.dumps({table: 1000, topic: 1000}), "votes": json.dumps(votes),
                            "outcomes": json.dumps({"postgres": {"kind": "done", "seconds": 0.1, "count": 1000},
                                                    "kafka": {"kind": "done", "seconds": 1.2, "count": 1000}})})
        cur.execute("analyze twophase.loads; analyze twophase.votes; analyze twophase.transitions")


def clean(dsn: str, pipeline: str) -> None:
    """Delete the pipeline's rows, then vacuum the tables: the dead index entries of 50,000
    deleted loads would slow every walk of the log's indexes (the list's pipelines: 50 ms
    became 160 ms after four runs) until autovacuum came by."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(_CLEAN, {"p": pipeline})
    conn = psycopg2.connect(dsn)
    try:
        conn.autocommit = True  # VACUUM cannot run inside a transaction
        with conn.cursor() as cur:
            cur.execute("vacuum (analyze) twophase.loads, twophase.votes, twophase.transitions, twophase.quarantine")
    finally:
        conn.close()


def time_pages(pages: dict[str, str], reps: int) -> dict[str, list[float]]:
    """Each page's render times in ms, through the plugin's app as a logged-in viewer."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from twophase_ui.app import app

    token = create_auth_manager().generate_jwt(SimpleAuthManagerUser(username="bench", role="viewer"))
    client = TestClient(app, headers={"Authorization": f"Bearer {token}"})
    figures = {}
    for name, path in pages.items():
        client.get(path).raise_for_status()  # warm-up: imports, connections, caches
        figures[name] = []
        for _ in range(reps):
            start = time.perf_counter()
            client.get(path).raise_for_status()
            figures[name].append((time.perf_counter() - start) * 1000)
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_pages", description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=50_000, help="loads of the throwaway pipeline (default 50000)")
    parser.add_argument("--reps", type=int, default=5, help="timed renders of each page (default 5)")
    args = parser.parse_args(argv)
    dsn = Connections.from_env().pg_dsn
    PostgresLog(dsn).ensure_schema()
    pipeline = f"bench_ui_{uuid.uuid4().hex[:8]}"
    try:
        start = time.perf_counter()
        fill(dsn, pipeline, args.loads)
        filled = time.perf_counter() - start
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("select count(*) from twophase.loads")
            total = cur.fetchone()[0]
        figures = time_pages({"list": "/", "list, pipeline": f"/?pipeline={pipeline}",
                              "load, newest": f"/loads/{pipeline}.run{args.loads}",
                              "load, oldest": f"/loads/{pipeline}.run1", "pipeline": f"/pipelines/{pipeline}"},
                             args.reps)
    finally:
        clean(dsn, pipeline)
    print(f"{args.loads:,} loads of a throwaway pipeline ({pipeline}, deleted since) written in {filled:.1f} s; "
          f"the log held {total:,} loads\n")
    print("| page | median ms | slowest ms |\n|---|---:|---:|")
    for name, times in figures.items():
        print(f"| {name} | {statistics.median(times):.0f} | {max(times):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
