"""Late input, on the real Airflow (scheduler, LocalExecutor, triggerer): a run of the hourly
example whose day folder has not landed waits for it deferred (the task holds no worker
slot: Airflow shows it `deferred`, its trigger looks in the triggerer), begins no load
meanwhile, and loads the hour once the folder lands, without anybody touching the run."""

from __future__ import annotations

import shutil
import time as time_module
import uuid
from datetime import date, datetime, time, timedelta, timezone

import pytest

from airflow_api import AirflowApi
from orders_sample.generate import generate
from running_airflow import end_leftover_runs, unpause
from support import fresh_day, orders_landing
from twophase.ids import load_id_for
from twophase.log import PostgresLog, UnknownLoad
from twophase.protocol.states import State

pytestmark = [pytest.mark.ui, pytest.mark.slow]
DAG_ID = "orders_hourly_totals"
START = date(2026, 1, 1)  # the DAG's start_date


@pytest.fixture
def api(airflow_ui) -> AirflowApi:
    """The hourly DAG unpaused, without its scheduled run: unpausing starts one (catchup is
    off), which would wait up to two hours for today's folder ahead of the test's own run
    (one run at a time). Paused again after, its runs ended.

    The run the scheduler starts is the one the DAG was due when it was parsed (once, when
    this Airflow started): the hour that just ended, or an earlier one when the hour turned
    since (CI 75, at 07:05 with the DAG parsed before 07:00). Once the DAG has its one run,
    the scheduler starts no other until a run of the DAG ends under it, and one ended
    through the API does not: so the test's run comes next. Ready when a run started since
    the unpause, or one of this hour (the DAG was unpaused before, in this hour), was ended."""
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    before = {r["dag_run_id"] for r in AirflowApi(*airflow_ui).runs(DAG_ID, "scheduled")}
    api = unpause(*airflow_ui, dag_ids=(DAG_ID,))
    deadline = time_module.monotonic() + 120
    while not [r for r in api.runs(DAG_ID, "scheduled")
               if r["dag_run_id"] not in before or datetime.fromisoformat(r["run_after"]) >= hour]:
        assert time_module.monotonic() < deadline, "unpausing the hourly DAG started no scheduled run"
        time_module.sleep(2)
    end_leftover_runs(*airflow_ui, dag_ids=(DAG_ID,), api=api)
    yield api
    api.pause(DAG_ID)
    end_leftover_runs(*airflow_ui, dag_ids=(DAG_ID,), api=api)


def test_a_run_whose_input_is_late_waits_deferred_then_loads_the_hour(api, pg_dsn):
    log = PostgresLog(pg_dsn)
    # A day of the DAG's life so far: the scheduler runs no run of a future logical date, and
    # a run before the DAG's start_date has no tasks. Its folder has not landed.
    day, folder = next((d, f) for d in (fresh_day(pg_dsn, DAG_ID, first=START) for _ in range(20))
                       if not (f := orders_landing() / f"date={d.isoformat()}").exists())
    hour = datetime.combine(day, time(5), tzinfo=timezone.utc)
    run_id = f"late_input_{uuid.uuid4().hex[:8]}"
    lid = load_id_for(DAG_ID, run_id)
    api.trigger(DAG_ID, run_id, {}, logical_date=(hour + timedelta(hours=1)).isoformat())
    try:
        assert api.wait_for_task(DAG_ID, run_id, "wait_for_input", {"deferred"}, timeout=300) == "deferred"
        assert api.task_state(DAG_ID, run_id, "begin") in (None, "none", "scheduled")
        with pytest.raises(UnknownLoad):
            log.get(lid)  # nothing logged, nothing staged while it waits
        generate(orders_landing(), day, 2000, bad_share=0.0)  # lands (written aside, then renamed into place)
        assert api.wait_for_run(DAG_ID, run_id, timeout=600) == "success"
        load = log.get(lid)
        assert load.state == State.COMMITTED and load.data_interval_start == hour, load
        assert load.expected_rows > 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
