"""The tests' running Airflow (tests/ui/conftest.py starts it): its own metadata database
and the DAGs its tests unpause.

Its metadata lives in a database of its own (TEST_DB, through TWOPHASE_AIRFLOW_DB), not in
the stack's `airflow`: the tests that run `airflow dags test` meanwhile on other workers
(tests/pipeline) write their runs to `airflow`, and a scheduler that saw them would run
their tasks a second time. Its DAGs are paused at creation, as the stack's are; each module
unpauses those it runs (UNPAUSED by default). Its twophase_recovery recovers RECOVERED only,
a pipeline with no loads (TWOPHASE_RECOVERY_PIPELINE): over every pipeline, it would sweep
and finish other tests' loads under them (the scheduling test unpauses it).
"""

from __future__ import annotations

import os

from airflow_api import AirflowApi
from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.log import PostgresLog, UnknownLoad
from twophase.protocol import coordinator
from twophase.protocol.states import State

TEST_DB = "airflow_ui_tests"
started_here = False  # this process started the tests' Airflow (tests/ui/conftest.py): it stops it too
UNPAUSED = ("orders_daily_totals",)
RECOVERED = "ui_tests_recovery"


def airflow_env(**extra: str) -> dict[str, str]:
    """The environment `scripts/stack airflow-up` starts the tests' Airflow with. Its DAG
    files do not change while it runs: the dag-processor parses each once at the start,
    not every 30 s (each parse is a fresh Python that imports Airflow: CPU the other
    workers' tests need). A wait for late input looks every 2 s, not every minute."""
    return {**os.environ, "TWOPHASE_AIRFLOW_DB": TEST_DB, "TWOPHASE_RECOVERY_PIPELINE": RECOVERED,
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600", "TWOPHASE_INPUT_POLL_S": "2", **extra}


def unpause(url: str, user: str, password: str, dag_ids=UNPAUSED, just_started: bool = False) -> AirflowApi:
    """Unpause the DAGs (once the dag-processor registered them); the API, logged in. When
    Airflow was just started, the runs an interrupted earlier test run left queued or
    running in TEST_DB are failed first: one run at a time, they would hold up this run's."""
    api = AirflowApi(url, user, password)
    for dag_id in dag_ids:
        api.unpause(dag_id)
    if just_started:
        end_leftover_runs(url, user, password, dag_ids, api)
    return api


def end_leftover_runs(url: str, user: str, password: str, dag_ids=UNPAUSED, api: AirflowApi | None = None) -> list[str]:
    """Fail the DAGs' runs that are still queued or running and roll back their loads that
    are still undecided (a failed run's load would otherwise wait for recovery); the run
    ids ended."""
    api = api or AirflowApi(url, user, password)
    ended = []
    for dag_id in dag_ids:
        for run in api.runs(dag_id, states=("queued", "running")):
            api.fail_run(dag_id, run["dag_run_id"])
            _roll_back(load_id_for(dag_id, run["dag_run_id"]))
            ended.append(run["dag_run_id"])
    return ended


def _roll_back(load_id: str) -> None:
    txlog = PostgresLog(os.environ["TWOPHASE_PG_DSN"])
    txlog.ensure_schema()  # a fresh stack: the first test to run may be this one
    try:
        load = txlog.get(load_id)
    except UnknownLoad:  # the run ended before its begin task logged the load
        return
    if load.state in (State.PREPARING, State.PREPARED):
        coordinator.rollback(txlog, Connections.from_env(), load_id, reason="the test that started its run ended")
