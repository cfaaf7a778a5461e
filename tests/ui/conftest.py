"""What the tests of the running Airflow share: the Airflow itself (api-server, scheduler,
dag-processor, triggerer of `scripts/stack airflow-up`, with a metadata database of its own:
running_airflow.py), started by the first test that needs it when it was not up, and
stopped after the last test marked `ui` in a row (they run in a row on one worker:
tests/conftest.py), so it starts once, not once per module.

A DAG runs one run at a time, so a run that a failed test leaves waiting would hold up
every later test's runs: after each test, its runs still queued or running are failed and
their loads rolled back (running_airflow.end_leftover_runs)."""

from __future__ import annotations

import pytest

import running_airflow
from running_airflow import airflow_env, end_leftover_runs, unpause
from support import stack


@pytest.fixture(scope="module")
def airflow_ui():
    """(url, user, password) of a running Airflow, orders_daily_totals unpaused; started
    here if it was not up."""
    started = "UI up at" not in stack("status")
    if started:
        stack("airflow-up", env=airflow_env())
        running_airflow.started_here = True
    url, _, user, _, password = stack("login").split()
    unpause(url, user, password, just_started=started)
    yield url, user, password


@pytest.fixture(autouse=True)
def _no_run_left_behind(request):
    """After a test on the running Airflow, no run of it is left queued or running."""
    yield
    if "airflow_ui" in request.fixturenames:
        left = end_leftover_runs(*request.getfixturevalue("airflow_ui"))
        if left:
            print(f"ended the runs this test left active: {', '.join(left)}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last `ui` test in a row (its fixtures torn down), stop the Airflow this
    process started: idle, it still takes CPU from the tests that follow."""
    result = yield
    if running_airflow.started_here and (nextitem is None or nextitem.get_closest_marker("ui") is None):
        stack("airflow-down")
        running_airflow.started_here = False
    return result
