"""Fixtures of the end-to-end tests: DAG runs through `airflow dags test` (the real
Airflow task runner, metadata DB and connections of the stack), on sample days no
earlier run used, with the landing folder in the test's own directory."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest

import support
from warm_airflow import dags_test

ROOT = Path(__file__).resolve().parents[2]
DAG_ID = "orders_daily_totals"


@dataclass
class DagRun:
    run_id: str
    state: str
    output: str

    def task_log(self, task_id: str) -> str:
        """The lines a task logged (the CLI interleaves tasks; each line names none, so
        this takes the lines between the task's start and end markers)."""
        start = self.output.find(f"[DAG TEST] starting task_id={task_id} ")
        end = self.output.rfind(f"[DAG TEST] end task task_id={task_id} ")
        assert start >= 0 and end > start, f"task {task_id} did not run:\n{self.output[-3000:]}"
        return self.output[start:end]


@pytest.fixture
def orders_data(tmp_path) -> Path:
    return tmp_path / "orders"


@pytest.fixture
def run_dag(orders_data):
    def run(conf: dict, dag_id: str = DAG_ID) -> DagRun:
        proc = dags_test([dag_id, "-c", json.dumps(conf)], {**os.environ, "ORDERS_DATA": str(orders_data)}, ROOT,
                         timeout=900)
        output = proc.stdout + proc.stderr
        finished = re.findall(r"DagRun Finished: .*? run_id=(\S+), .*? state=(\w+)", output)
        assert finished, f"the DAG run did not finish (exit {proc.returncode}):\n{output[-4000:]}"
        return DagRun(*finished[-1], output)
    return run


@pytest.fixture
def fresh_day(pg_dsn) -> date:
    """A day no load of the pipeline has touched, and with no rows in the table."""
    return support.fresh_day(pg_dsn)
