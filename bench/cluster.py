"""The example DAG on local Spark and on the stack's Spark standalone cluster, side by side.

    python -m bench.cluster [--lines 100000] [--reps 3]

Needs the stack and its cluster: scripts/stack up; scripts/stack cluster up;
eval "$(scripts/stack env)". Every repetition runs `airflow dags test orders_daily_totals`
on one generated day twice, in mode replace: with spark_default (local[*], the baseline)
and with the cluster's connection (AIRFLOW_CONN_SPARK_CLUSTER: a standalone master, one
worker that cannot see the checkout), alternating which goes first. Both use an Iceberg
catalog of this run whose warehouse, like the day's files, lies outside the checkout where
the worker can reach it. Reported per run: the whole DAG run (`airflow dags test`, Spark's
start included) and the load's phases from the transaction log (prepare: begin to
PREPARED, the Spark job; then the vote and the commit). Medians go to stdout as a
Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date, timedelta
from pathlib import Path

from orders_sample.generate import generate
from twophase.ids import load_id_for
from twophase.log import PostgresLog, TransactionLog
from twophase.participants.iceberg import catalog_of

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "orders_daily_totals"


def run_dag(conf: dict, env: dict) -> tuple[float, str, str]:
    """(seconds, run id, state) of one `airflow dags test`."""
    started = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test", DAG_ID, "-c",
                           json.dumps(conf)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - started
    finished = re.findall(r"DagRun Finished: .*? run_id=(\S+), .*? state=(\w+)", proc.stdout + proc.stderr)
    if not finished:
        raise RuntimeError(f"the DAG run did not finish:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return took, *finished[-1]


def phases(log: TransactionLog, run_id: str) -> dict[str, float]:
    load = log.get(load_id_for(DAG_ID, run_id))
    if load.state.value != "COMMITTED":
        raise RuntimeError(f"run {run_id}: load {load.load_id} is {load.state}: {load.reason}")
    return {"prepare": (load.prepared_at - load.began_at).total_seconds(),
            "vote": (load.decided_at - load.prepared_at).total_seconds(),
            "commit": (load.finished_at - load.decided_at).total_seconds()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="input lines of the day (1%% bad)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    cluster = os.environ.get("AIRFLOW_CONN_SPARK_CLUSTER")
    if not cluster:
        print("AIRFLOW_CONN_SPARK_CLUSTER is not set: scripts/stack cluster up; eval \"$(scripts/stack env)\"",
              file=sys.stderr)
        return 2
    shared = Path(tempfile.mkdtemp(prefix="twophase-bench-cluster-", dir="/var/tmp"))
    stack_catalog = json.loads(os.environ["TWOPHASE_ICEBERG_CATALOG"])
    catalog = {**stack_catalog, "name": f"bench_{uuid.uuid4().hex[:8]}", "warehouse": (shared / "warehouse").as_uri()}
    day = date(2099, 1, 1) + timedelta(days=uuid.uuid4().int % 3000)
    data = shared / "orders"
    generate(data / "landing", day, args.lines, bad_share=0.01)
    base = {**os.environ, "ORDERS_DATA": str(data), "TWOPHASE_ICEBERG_CATALOG": json.dumps(catalog),
            "AIRFLOW_CONN_TWOPHASE_ICEBERG": json.dumps({"conn_type": "iceberg", "extra": catalog})}
    where = {"local": base, "cluster": {**base, "AIRFLOW_CONN_SPARK_DEFAULT": cluster}}
    log = PostgresLog(os.environ["TWOPHASE_PG_DSN"])
    runs: dict[str, list[dict]] = {"local": [], "cluster": []}
    try:
        for rep in range(args.reps):
            for name in (("local", "cluster") if rep % 2 == 0 else ("cluster", "local")):
                took, run_id, state = run_dag({"date": day.isoformat(), "mode": "replace"}, where[name])
                if state != "success":
                    raise RuntimeError(f"the {name} run {run_id} ended {state}")
                runs[name].append({"dag_run": took, **phases(log, run_id)})
                print(f"rep {rep + 1} {name}: DAG run {took:.1f} s, {runs[name][-1]}", file=sys.stderr)
    finally:
        cat = catalog_of(json.dumps(catalog))
        for namespace in cat.list_namespaces():
            for identifier in cat.list_tables(namespace):
                cat.purge_table(identifier)
        shutil.rmtree(shared, ignore_errors=True)
    keys = list(runs["local"][0])
    print(f"{args.lines:,} input lines, {args.reps} runs each, medians in seconds\n")
    print("| | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name in ("local", "cluster"):
        print(f"| {name} | " + " | ".join(f"{statistics.median(r[k] for r in runs[name]):.1f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
