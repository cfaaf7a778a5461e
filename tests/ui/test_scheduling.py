"""Scheduling for real: with the scheduler running, orders_daily_totals runs on its own
schedule (shortened here with ORDERS_SCHEDULE) and commits; the commit's assets then
start customer_totals_downstream; twophase_recovery runs on its own schedule too."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from orders_sample.generate import generate
from support import orders_landing, stack
from twophase.log import TransactionLog

pytestmark = [pytest.mark.ui, pytest.mark.slow]
SCHEDULE = "*/2 * * * *"


@pytest.fixture(scope="module")
def scheduler_with_short_schedule(pg_dsn):
    """Airflow restarted with the pipeline on a 2-minute schedule; put back as it was after.
    Yields when it restarted, and the loads that had committed today before."""
    was_up = "UI up at" in stack("status")
    stack("airflow-down")
    today = datetime.now(timezone.utc).date()
    committed_before = [x for x in TransactionLog(pg_dsn).recent(1000, "orders_daily_totals")
                        if x.state.value == "COMMITTED" and x.data_interval_start.date() == today]
    # Today's orders, before the scheduler starts: its first run loads today at once.
    generate(orders_landing(), today, 2000, bad_share=0.0)
    restarted = datetime.now(timezone.utc)  # the scheduler may start a run before airflow-up returns
    stack("airflow-up", env={**os.environ, "ORDERS_SCHEDULE": SCHEDULE})
    yield restarted, committed_before
    stack("airflow-down")
    if was_up:
        stack("airflow-up", env={k: v for k, v in os.environ.items() if k != "ORDERS_SCHEDULE"})


def _runs(dag_id: str, since: datetime, run_type: str | None = None):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        query = select(DagRun).where(DagRun.dag_id == dag_id, DagRun.start_date >= since)
        if run_type:
            query = query.where(DagRun.run_type == run_type)
        return [(r.run_id, r.state, r.start_date) for r in session.scalars(query.order_by(DagRun.start_date))]


def _wait_for(what: str, check, timeout: float = 600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(5)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


def test_a_scheduled_run_commits_and_starts_the_downstream_dag(scheduler_with_short_schedule, pg_dsn):
    since, committed_before = scheduler_with_short_schedule
    today = since.date()
    log = TransactionLog(pg_dsn)

    if committed_before:  # an earlier scheduled run committed today: later ones must load nothing
        run_id, state, _ = _wait_for("a scheduled run of orders_daily_totals that finished", lambda: [
            r for r in _runs("orders_daily_totals", since, "scheduled") if r[1] in ("success", "failed")])[0]
        assert state == "success" and [x for x in log.recent(1000, "orders_daily_totals") if x.run_id == run_id] == []
        return

    def committed_by_a_scheduled_run():
        for run_id, state, _start in _runs("orders_daily_totals", since, "scheduled"):
            loads = [x for x in log.recent(1000, "orders_daily_totals") if x.run_id == run_id]
            if state == "success" and loads and loads[0].state.value == "COMMITTED":
                return loads[0]
        return None

    load = _wait_for("a scheduled run of orders_daily_totals that commits", committed_by_a_scheduled_run)
    assert load.data_interval_start.date() == today

    # Its assets start the downstream DAG, which sees the committed load's id.
    downstream = _wait_for("an asset-triggered run of customer_totals_downstream", lambda: [
        r for r in _runs("customer_totals_downstream", since, "asset_triggered") if r[1] == "success"], timeout=300)
    reported = [_returned("customer_totals_downstream", r[0], "report") for r in downstream]
    assert any(load.load_id in (ids or []) for ids in reported), reported


def _returned(dag_id: str, run_id: str, task_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        value = session.scalar(select(XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == task_id,
            XComModel.key == "return_value"))
    return json.loads(value) if isinstance(value, str) else value


def test_the_recovery_dag_runs_on_its_own_schedule(scheduler_with_short_schedule):
    # Catchup is off, so the scheduler runs it once at once, then every 10 minutes.
    epoch = datetime(2000, 1, 1, tzinfo=timezone.utc)
    runs = _wait_for("a scheduled run of twophase_recovery", lambda: [
        r for r in _runs("twophase_recovery", epoch, "scheduled") if r[1] == "success"], timeout=300)
    assert runs
