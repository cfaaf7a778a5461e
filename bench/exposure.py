"""The exposure window of the example DAG's load, before and after "nothing held before
the decision", side by side in one run.

    python -m bench.exposure [--lines 3000000] [--customers 1050000] [--reps 3] [--baseline 360c324]

Needs the stack: scripts/stack up; eval "$(scripts/stack env)". One generated day (3M input
lines among 1.05M customers: about 1M result rows per target) is loaded by
`airflow dags test orders_daily_totals` in mode replace, by the baseline release (its tree
from `git archive`, as bench/compare makes it; its log and tables in the stack's database
twophase_baseline) and by this checkout, alternating which goes first, both with a
driver of 6 GiB (the default 1 GiB runs out of memory on 3M lines).

The exposure window is how long a load holds anything on its targets (a prepared
transaction and its locks, an open copy transaction): before, from the end of the Spark
job, which ended with PREPARE TRANSACTION (the log's prepared_at; the job's own promote
and PREPARE came just before it, so this is the window's lower bound), to the end of phase
2; now, from the vote making the participants ready (exposed_at) to the end of phase 2.
A watcher also reads the window from outside: every 0.1 s, the earliest start of a
transaction writing a target table (pg_locks, pg_stat_activity); "exposure (seen)" runs
from there to the end of phase 2, for both releases alike.
Medians go to stdout as a Markdown table, with the whole DAG run for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import uuid
from datetime import date, timedelta
from pathlib import Path
from urllib.parse import urlsplit

from bench.cluster import DAG_ID, run_dag
from bench.compare import BASELINE_DB, baseline_dsn, commit_of, tree_of
from orders_sample.generate import generate
from twophase.ids import load_id_for

ROOT = Path(__file__).resolve().parents[1]
DRIVER_MEMORY = "6g"  # local mode's single JVM: Spark's default 1g runs out on a day of 3M lines


def release_env(tree: Path, baseline: bool, data: Path) -> dict[str, str]:
    """The environment of one release's DAG run: its DAGs and plugins; the baseline's log
    and tables in the baseline database."""
    spark = json.loads(os.environ["AIRFLOW_CONN_SPARK_DEFAULT"])
    spark["extra"] = {**spark.get("extra", {}), "spark.driver.memory": DRIVER_MEMORY}
    env = {**os.environ, "ORDERS_DATA": str(data), "AIRFLOW__CORE__DAGS_FOLDER": str(tree / "dags"),
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(tree / "plugins"), "PYTHONPATH": str(tree / "plugins"),
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark)}
    if baseline:
        conn = json.loads(os.environ["AIRFLOW_CONN_TWOPHASE_POSTGRES"])
        env["AIRFLOW_CONN_TWOPHASE_POSTGRES"] = json.dumps({**conn, "schema": BASELINE_DB})
        env["TWOPHASE_PG_DSN"] = baseline_dsn(os.environ["TWOPHASE_PG_DSN"])
    return env


# The example DAG's tables in its log's database (since issue 26 this release writes the
# summary on the stock server, where it commits in the vote: a table that is not there is
# not watched).
TARGETS = ("analytics.customer_daily_totals", "analytics.orders_daily_summary")
FIRST_WRITER = """
select min(a.xact_start) from pg_locks l join pg_stat_activity a on a.pid = l.pid
 where l.database = (select oid from pg_database where datname = current_database())
   and l.relation = any(array(select to_regclass(t) from unnest(%s::text[]) t)) and a.pid <> pg_backend_pid()
   and l.mode in ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')"""


class FirstWriter(threading.Thread):
    """Watches the database from outside, every 0.1 s, for the earliest start of a
    transaction that writes a target table: where the window really opens, whatever the
    release's log says (the baseline's promote ran inside its Spark job, unlogged)."""

    def __init__(self, dsn: str):
        super().__init__(daemon=True)
        self.dsn, self.first, self.done = dsn, None, threading.Event()

    def run(self) -> None:
        import psycopg2

        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True  # each look its own transaction: pg_stat_activity is read once per transaction
        try:
            with conn.cursor() as cur:
                while not self.done.wait(0.1):
                    cur.execute(FIRST_WRITER, (list(TARGETS),))
                    seen = cur.fetchone()[0]
                    if seen is not None and (self.first is None or seen < self.first):
                        self.first = seen
        finally:
            conn.close()


def figures(dsn: str, run_id: str, baseline: bool, first_writer) -> dict[str, float]:
    """The load's exposure window and phases, from its release's transaction log (read
    as rows: the baseline's log has no exposed_at)."""
    import psycopg2
    import psycopg2.extras

    with psycopg2.connect(dsn) as conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute("select * from twophase.loads where load_id = %s", (load_id_for(DAG_ID, run_id),))
        load = cur.fetchone()
    if load is None or load["state"] != "COMMITTED":
        raise RuntimeError(f"run {run_id}: the load is {load and load['state']}: {load and load['reason']}")
    start = load["prepared_at"] if baseline else load["exposed_at"]
    seen = float("nan") if first_writer is None else (load["finished_at"] - first_writer).total_seconds()
    return {"exposure (log)": (load["finished_at"] - start).total_seconds(),
            "exposure (seen)": seen,  # nan: no writer lasted the 0.1 s between two looks
            "prepare": (load["prepared_at"] - load["began_at"]).total_seconds(),
            "vote": (load["decided_at"] - load["prepared_at"]).total_seconds(),
            "commit": (load["finished_at"] - load["decided_at"]).total_seconds()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.exposure", description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3_000_000, help="input lines of the day (no bad lines)")
    parser.add_argument("--customers", type=int, default=1_050_000, help="distinct customers (about the rows)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--baseline", default="360c324", help="the release before (default: the last one "
                                                               "whose Spark job ended with PREPARE)")
    args = parser.parse_args(argv)
    trees = {"baseline": tree_of(commit_of(args.baseline)), "now": ROOT}
    dsns = {"baseline": baseline_dsn(os.environ["TWOPHASE_PG_DSN"]), "now": os.environ["TWOPHASE_PG_DSN"]}
    data = Path(tempfile.mkdtemp(prefix="twophase-bench-exposure-", dir="/var/tmp")) / "orders"
    day = date(2099, 1, 1) + timedelta(days=uuid.uuid4().int % 3000)
    generate(data / "landing", day, args.lines, bad_share=0.0, customers=args.customers)
    runs: dict[str, list[dict]] = {"baseline": [], "now": []}
    try:
        for rep in range(args.reps):
            for name in (("baseline", "now") if rep % 2 == 0 else ("now", "baseline")):
                env = release_env(trees[name], name == "baseline", data)
                watch = FirstWriter(dsns[name])
                watch.start()
                try:
                    took, run_id, state = run_dag({"date": day.isoformat(), "mode": "replace"}, env)
                finally:
                    watch.done.set()
                    watch.join()
                if state != "success":
                    raise RuntimeError(f"the {name} run {run_id} ended {state}")
                runs[name].append({"dag_run": took, **figures(dsns[name], run_id, name == "baseline", watch.first)})
                print(f"rep {rep + 1} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(data.parent, ignore_errors=True)
    keys = list(runs["now"][0])
    print(f"{args.lines:,} input lines, {args.customers:,} customers, {args.reps} runs each, "
          f"medians in seconds (baseline {args.baseline}: log in database {urlsplit(dsns['baseline']).path[1:]})\n")
    print("| release | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name in ("baseline", "now"):
        print(f"| {name} | " + " | ".join(f"{statistics.median(r[k] for r in runs[name]):.1f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
