"""Helpers of the hourly example's end-to-end test: runs for a given hour (`airflow dags
test` with a logical date), its expected totals computed in plain Python from the sample
files, and what the log, the table and the topic hold for an hour."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import psycopg2

import support
from warm_airflow import dags_test
from expected import _valid as valid_order  # the daily example's rules, as docs/example.md states them

ROOT = Path(__file__).resolve().parents[2]
DAG_ID = PIPELINE = "orders_hourly_totals"
TABLE, TOPIC = "analytics.customer_hourly_totals", "customer-hourly-totals"


@dataclass
class HourRun:
    run_id: str
    state: str
    output: str

    def task_log(self, task_id: str) -> str:
        start = self.output.find(f"[DAG TEST] starting task_id={task_id} ")
        end = self.output.rfind(f"[DAG TEST] end task task_id={task_id} ")
        assert start >= 0 and end > start, f"task {task_id} did not run:\n{self.output[-3000:]}"
        return self.output[start:end]


def run_hour(orders_data: Path, hour: datetime, conf: dict | None = None, env: dict | None = None) -> HourRun:
    """A run of the hourly DAG that loads [hour, hour + 1h): a manual run's data interval
    is the last whole hour before its logical date, so the logical date is the hour's end.
    `env`: more environment for the run (the DAG file's settings)."""
    logical = (hour + timedelta(hours=1)).isoformat()
    proc = dags_test([DAG_ID, logical, "-c", json.dumps(conf or {})],
                     {**os.environ, "ORDERS_DATA": str(orders_data), **(env or {})}, ROOT, timeout=900)
    output = proc.stdout + proc.stderr
    finished = re.findall(r"DagRun Finished: .*? run_id=(\S+), .*? state=(\w+)", output)
    assert finished, f"the DAG run did not finish (exit {proc.returncode}):\n{output[-4000:]}"
    return HourRun(*finished[-1], output)


def fresh_day(pg_dsn: str) -> date:
    """A day no load of the hourly pipeline has touched."""
    return support.fresh_day(pg_dsn, PIPELINE)


@dataclass
class HourExpected:
    totals: dict[str, tuple[int, Decimal]]  # customer: (orders, revenue)
    lines: int                             # non-blank lines of the day's folder
    rejected: int                          # lines that are no valid order of the day
    other_hours: int                       # valid lines of other hours


def expected_hour(folder: Path, hour: datetime) -> HourExpected:
    """The hour's totals per customer and the line counts, from the sample files."""
    totals: dict[str, tuple[int, Decimal]] = {}
    lines = rejected = other = 0
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            lines += 1
            valid = valid_order(line, hour.date())
            if valid is None:
                rejected += 1
            elif not hour <= valid[2] < hour + timedelta(hours=1):
                other += 1
            else:
                orders, revenue = totals.get(valid[0], (0, Decimal("0.00")))
                totals[valid[0]] = (orders + 1, revenue + valid[1])
    return HourExpected(totals, lines, rejected, other)


def loads_of_hour(pg_dsn: str, hour: datetime) -> list[tuple]:
    """(load_id, state, data_interval_end) of the pipeline's loads of the hour, oldest first."""
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select load_id, state, data_interval_end from twophase.loads where pipeline = %s "
                    "and data_interval_start = %s order by began_at", (PIPELINE, hour))
        return cur.fetchall()


def hour_rows(pg_dsn: str, hour: datetime) -> dict[str, tuple]:
    """{customer: (orders, revenue, load_id)} of the hour in the table."""
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select customer_id, orders, revenue, load_id from {TABLE} where hour = %s", (hour,))
        return {r[0]: r[1:] for r in cur.fetchall()}
