"""The trigger form's Params refuse bad input before any task runs, naming the param; a key
that is not a param fails the run in its first task, naming the key and the known ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg2
import pytest
from airflow.dag_processing.dagbag import DagBag

from warm_airflow import dags_test

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("conf, message", [
    ({"date": "20-11-2026"}, "Invalid input for param date: '20-11-2026' is not a 'date'"),
    ({"mode": "upsert"}, "Invalid input for param mode: 'upsert' is not one of ['append', 'replace']"),
    ({"max_rejected_share": 2}, "Invalid input for param max_rejected_share: 2 is greater than the maximum of 1"),
    ({"min_rows": -1}, "Invalid input for param min_rows: -1 is less than the minimum of 0"),
])
def test_bad_params_are_refused_with_the_params_name(conf, message):
    proc = dags_test(["orders_daily_totals", "-c", json.dumps(conf)], dict(os.environ), ROOT, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert message in output
    assert "[DAG TEST] starting task_id=begin" not in output, "no task may run on bad params"


def test_an_unknown_trigger_key_fails_the_run_before_anything_is_logged(run_dag, fresh_day, pg_dsn):
    """Airflow accepts undeclared conf keys (they become params without a schema), so begin
    refuses them: a misspelt gate must not silently fall back to its default."""
    run = run_dag({"date": fresh_day.isoformat(), "max_rejected_shar": 0.5})
    assert run.state == "failed", run.output[-4000:]
    declared = sorted(DagBag(dag_folder=str(ROOT / "dags" / "orders_daily_totals.py")).dags["orders_daily_totals"].params)
    assert {"date", "max_rejected_share", "min_rows", "mode"} <= set(declared)
    refusal = (f"unknown trigger parameter 'max_rejected_shar'; known: {', '.join(declared)}. "
               "Correct the key and trigger again")
    assert refusal in run.task_log("begin")
    assert "no load was begun: " + refusal in run.task_log("finish")
    assert "[DAG TEST] starting task_id=prepare" not in run.output
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from twophase.loads where pipeline = 'orders_daily_totals' "
                    "and data_interval_start::date = %s", (fresh_day,))
        assert cur.fetchone()[0] == 0, "the refused run logged a load"
