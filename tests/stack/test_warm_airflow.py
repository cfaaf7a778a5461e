"""The tests' `airflow dags test` from a warm Python (tests/warm_airflow.py) ends as the
`airflow` command does, reuses its server only while Airflow's configuration is the same,
and a run past its timeout is killed with every process it started."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import warm_airflow

ROOT = Path(__file__).resolve().parents[2]
BAD_MODE = ["orders_daily_totals", "-c", json.dumps({"mode": "upsert"})]
REFUSED = "Invalid input for param mode: 'upsert' is not one of ['append', 'replace']"

SLEEPER = '''
import subprocess, time
import pendulum
from airflow.sdk import dag, task

@dag(dag_id="warm_airflow_sleeper", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def warm_airflow_sleeper():
    @task
    def sleep():
        child = subprocess.Popen(["sleep", "600"])
        open({marker!r}, "w").write(str(child.pid))
        time.sleep(600)
    sleep()

warm_airflow_sleeper()
'''


def _run(monkeypatch, warm: bool, args=BAD_MODE, env=None, timeout: float = 300):
    monkeypatch.setenv("TWOPHASE_TEST_WARM_AIRFLOW", "1" if warm else "0")
    return warm_airflow.dags_test(args, env or dict(os.environ), ROOT, timeout)


def test_a_warm_run_ends_as_the_airflow_command_does(monkeypatch):
    plain = _run(monkeypatch, warm=False)
    first = _run(monkeypatch, warm=True)
    server = warm_airflow._current.proc.pid
    second = _run(monkeypatch, warm=True)
    for run in (plain, first, second):
        assert run.returncode == 1 and REFUSED in run.stdout + run.stderr, run.stderr[-3000:]
    assert warm_airflow._current.proc.pid == server, "the second run started a new server"

    other = _run(monkeypatch, warm=True, env={**os.environ, "AIRFLOW__CORE__DEFAULT_TIMEZONE": "UTC"})
    assert other.returncode == 1 and REFUSED in other.stdout + other.stderr
    assert warm_airflow._current.proc.pid != server, "a run of another configuration reused the server"


@pytest.mark.slow  # a minute, most of it waiting for the timeout: handed out early (conftest.py)
def test_a_run_past_its_timeout_is_killed_with_what_it_started(monkeypatch, tmp_path):
    dags, marker = tmp_path / "dags", tmp_path / "sleeping.pid"
    dags.mkdir()
    (dags / "warm_airflow_sleeper.py").write_text(SLEEPER.format(marker=str(marker)))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    with pytest.raises(subprocess.TimeoutExpired):
        _run(monkeypatch, warm=True, args=["warm_airflow_sleeper"], env=env, timeout=45)
    assert marker.exists(), "the task never started within the timeout: the machine is slower than this test allows"
    sleeping = int(marker.read_text())
    deadline = time.monotonic() + 10
    while _alive(sleeping):
        assert time.monotonic() < deadline, "a process the run started outlived its timeout"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False
