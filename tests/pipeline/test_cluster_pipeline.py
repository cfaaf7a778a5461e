"""The example DAG on the stack's Spark standalone cluster (docs/clusters.md, the recipe).

The Spark connection `spark_default` of the DAG run is the stack's cluster connection: master
spark://127.0.0.1:17077 in client deploy mode, executors on a worker that cannot see the
checkout (its own Python from requirements-executor.txt, its own working folder). What
executors read and write is on storage they share with the driver, as on a real cluster: the
landing and rejects folders under ORDERS_DATA, and the warehouse of an Iceberg catalog of
the test's own. The day commits with exact counts in every target, its rejected lines are all
at the rejects URI, and the master lists the prepare as an application its worker ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from expected import expected_totals
from orders_sample.generate import generate
from support import ROOT, localstack
from test_orders_pipeline import assert_exact_result, assert_verified, loads_of_day

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.usefixtures("stack_cluster")]


def _on_the_cluster(monkeypatch, catalog: str) -> None:
    """This test's DAG runs submit to the stack's Spark cluster, with an Iceberg catalog whose
    warehouse the worker can reach."""
    cluster = os.environ.get("AIRFLOW_CONN_SPARK_CLUSTER")
    if not cluster:
        pytest.fail("AIRFLOW_CONN_SPARK_CLUSTER is not set: `scripts/stack cluster up` and "
                    "eval \"$(scripts/stack env)\" first (scripts/test does both)")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", cluster)
    monkeypatch.setenv("AIRFLOW_CONN_TWOPHASE_ICEBERG", json.dumps({"conn_type": "iceberg", "extra": json.loads(catalog)}))


def test_the_example_dag_commits_on_the_spark_cluster(run_dag, orders_data, fresh_day, pg_dsn, kafka_bootstrap,
                                                      monkeypatch, shared_catalog):
    _on_the_cluster(monkeypatch, shared_catalog)
    made = generate(orders_data / "landing", fresh_day, 5000, bad_share=0.02)
    master = localstack("spark_cluster")
    before = {a["id"] for a in master.master_state().get("completedapps", [])}
    started = time.monotonic()
    run = run_dag({"date": fresh_day.isoformat(), "max_rejected_share": 0.05})
    print(f"the DAG run on the Spark cluster took {time.monotonic() - started:.1f} s")
    assert run.state == "success", run.output[-4000:]
    # The fast path's Java function, compiled on the driver, ran on the cluster's executors.
    assert ("Java functions twophase_example_fast_order, twophase_example_fast_event registered from"
            in run.task_log("prepare"))
    [(load_id, state, _reason)] = loads_of_day(pg_dsn, fresh_day)
    assert state == "COMMITTED"
    assert_exact_result(pg_dsn, kafka_bootstrap, made.folder, fresh_day, load_id)
    assert_verified(pg_dsn, kafka_bootstrap, fresh_day)

    _expected, _lines, rejected = expected_totals(made.folder, fresh_day)
    assert rejected == made.bad_lines > 0
    kept = sum(1 for p in (orders_data / "rejects").rglob("*.json") for _ in p.open())
    assert kept == rejected, f"{rejected} lines rejected, {kept} at the rejects URI"

    ran = [a for a in master.master_state().get("completedapps", []) if a["id"] not in before]
    assert ran, "the Spark master ran no application for the DAG run: the prepare did not use the cluster"
    assert "spark://127.0.0.1" in run.task_log("prepare")


def test_the_cluster_bench_runs_at_a_toy_size():
    """bench/cluster.py (local Spark beside the stack's cluster) runs to its report, so it
    cannot rot between the reports made with it; its figures are not checked here."""
    proc = subprocess.run([sys.executable, "-m", "bench.cluster", "--lines", "2000", "--reps", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "| local |" in proc.stdout and "| cluster |" in proc.stdout, proc.stdout
