"""Scheduling for real: with the scheduler running, orders_daily_totals runs on its own
schedule (shortened here with ORDERS_SCHEDULE) and commits; the commit's assets then
start customer_totals_downstream; twophase_recovery runs on its own schedule too, at once
when a commit dies half-way (its watcher in the triggerer), and rejects an approval whose
asking run has ended. What Airflow ran is read
through its REST API (its metadata lives in the tests' own database,
tests/ui/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import psycopg2
import pytest

import running_airflow
from airflow_api import AirflowApi
from orders_sample.generate import generate
from running_airflow import RECOVERED, UNPAUSED, airflow_env, unpause
from support import count_table_rows, create_schema, header, make_df, make_spec, orders_landing, read_topic, stack
from twophase.connections import Connections
from twophase.gates import approval
from twophase.log import PostgresLog
from twophase.protocol import coordinator
from twophase.protocol.states import State

pytestmark = [pytest.mark.ui, pytest.mark.slow]
SCHEDULE = "*/2 * * * *"
SCHEDULED = ("orders_daily_totals", "customer_totals_downstream", "twophase_recovery")


@pytest.fixture(scope="module")
def scheduler_with_short_schedule(pg_dsn):
    """Airflow restarted with the pipeline on a 2-minute schedule, and stopped after: a
    later test that needs it starts it again (tests/ui/conftest.py), an Airflow a person
    had up is started again at once. Yields when it restarted, the loads that had
    committed today before, and the API."""
    persons = "UI up at" in stack("status") and not running_airflow.started_here
    stack("airflow-down")
    today = datetime.now(timezone.utc).date()
    committed_before = [x for x in PostgresLog(pg_dsn).recent(1000, "orders_daily_totals")
                        if x.state.value == "COMMITTED" and x.data_interval_start.date() == today]
    # Today's orders, before the scheduler starts: its first run loads today at once.
    generate(orders_landing(), today, 2000, bad_share=0.0)
    restarted = datetime.now(timezone.utc)  # the scheduler may start a run before airflow-up returns
    stack("airflow-up", env=airflow_env(ORDERS_SCHEDULE=SCHEDULE))
    url, _, user, _, password = stack("login").split()
    api = unpause(url, user, password, SCHEDULED)
    api.reparse("twophase_recovery")  # its watcher starts at a parse that finds it unpaused
    yield restarted, committed_before, api
    for dag_id in set(SCHEDULED) - set(UNPAUSED):  # as they were: paused
        api.pause(dag_id)
    stack("airflow-down")
    running_airflow.started_here = False
    if persons:
        stack("airflow-up", env=airflow_env())


def _runs(api: AirflowApi, dag_id: str, since: datetime, run_type: str | None = None):
    return [(r["dag_run_id"], r["state"], r["start_date"]) for r in api.runs(dag_id, run_type, since.isoformat())]


def _wait_for(what: str, check, timeout: float = 600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(5)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


def test_a_scheduled_run_commits_and_starts_the_downstream_dag(scheduler_with_short_schedule, pg_dsn):
    since, committed_before, api = scheduler_with_short_schedule
    today = since.date()
    log = PostgresLog(pg_dsn)

    if committed_before:  # an earlier scheduled run committed today: later ones must load nothing
        run_id, state, _ = _wait_for("a scheduled run of orders_daily_totals that finished", lambda: [
            r for r in _runs(api, "orders_daily_totals", since, "scheduled") if r[1] in ("success", "failed")])[0]
        assert state == "success" and [x for x in log.recent(1000, "orders_daily_totals") if x.run_id == run_id] == []
        return

    def committed_by_a_scheduled_run():
        for run_id, state, _start in _runs(api, "orders_daily_totals", since, "scheduled"):
            loads = [x for x in log.recent(1000, "orders_daily_totals") if x.run_id == run_id]
            if state == "success" and loads and loads[0].state.value == "COMMITTED":
                return loads[0]
        return None

    load = _wait_for("a scheduled run of orders_daily_totals that commits", committed_by_a_scheduled_run)
    assert load.data_interval_start.date() == today

    # Its assets start the downstream DAG, which sees the committed load's id.
    downstream = _wait_for("an asset-triggered run of customer_totals_downstream", lambda: [
        r for r in _runs(api, "customer_totals_downstream", since, "asset_triggered") if r[1] == "success"], timeout=300)
    reported = [api.returned("customer_totals_downstream", r[0], "report") for r in downstream]
    assert any(load.load_id in (ids or []) for ids in reported), reported


def test_the_recovery_dag_runs_on_its_own_schedule(scheduler_with_short_schedule):
    # Catchup is off, so the scheduler runs it once as soon as it is unpaused, then every 10 minutes.
    api, epoch = scheduler_with_short_schedule[2], datetime(2000, 1, 1, tzinfo=timezone.utc)
    # ... of a pipeline of its own (running_airflow.RECOVERED): the tests on the other workers'
    # loads are not its to recover
    assert api.dag_params("twophase_recovery")["pipeline"]["value"] == RECOVERED
    runs = _wait_for("a scheduled run of twophase_recovery", lambda: [
        r for r in _runs(api, "twophase_recovery", epoch, "scheduled") if r[1] == "success"], timeout=300)
    assert runs


COMMIT = "import sys; from twophase.connections import Connections; from twophase.log import PostgresLog; " \
         "from twophase.protocol import coordinator; " \
         "coordinator.commit(PostgresLog(Connections.from_env().pg_dsn), Connections.from_env(), sys.argv[1])"


def test_a_commit_that_dies_half_way_is_finished_by_recovery_at_once(scheduler_with_short_schedule, pg_dsn,
                                                                      kafka_bootstrap, spark, unique_name):
    """The issue's case: the commit dies after the Kafka copy and before COMMIT PREPARED, so
    Kafka's readers see the load and Postgres's do not. The recovery DAG's watcher sees the
    load's driver gone and wakes it: the load commits in seconds, not at the next of its
    10-minute runs."""
    api, rows = scheduler_with_short_schedule[2], 50
    table, topic = f"core_tests.{unique_name}", unique_name.replace("_", "-")
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "core_tests")
        cur.execute(f"create table {table} (customer_id text, day date, orders int, revenue numeric(12, 2), "
                    "note text, load_id text not null)")
    log, conns = PostgresLog(pg_dsn), Connections.from_env()
    spec = make_spec({"table": table, "topic": topic}, pipeline=RECOVERED)  # the pipeline its recovery watches
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, make_df(spark, rows))
    assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING

    killed = datetime.now(timezone.utc)
    died = subprocess.run([sys.executable, "-c", COMMIT, spec.load_id], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TWOPHASE_FAILPOINT": "kafka.copy_committed"})
    assert died.returncode == -9, died.stderr[-2000:]

    def seen():
        return (count_table_rows(pg_dsn, table, spec.load_id),
                sum(1 for m in read_topic(kafka_bootstrap, topic) if header(m, "load_id") == spec.load_id))
    assert log.get(spec.load_id).state == State.COMMITTING and seen() == (0, rows)  # half visible

    _wait_for(f"load {spec.load_id} committed", lambda: log.get(spec.load_id).state == State.COMMITTED, timeout=180)
    took = (datetime.now(timezone.utc) - killed).total_seconds()
    assert seen() == (rows, rows)  # exactly once on both sides
    # Woken by the watcher, not its 10-minute schedule (whose run could have come meanwhile).
    _wait_for("a run of twophase_recovery woken after the kill", lambda: _runs(
        api, "twophase_recovery", killed, "asset_triggered"), timeout=60)
    print(f"committed by a woken recovery run {took:.0f} s after its commit died")


def test_an_approval_whose_asking_run_ended_is_rejected_by_the_recovery_dag_at_once(scheduler_with_short_schedule,
                                                                                     pg_dsn, unique_name):
    """A load waits for a person's approval asked by a run that has since ended (killed,
    marked failed: nobody can answer it any more), and one asked by a run Airflow does not
    know. A run of the recovery DAG asks Airflow for the runs' states: the first load is
    rejected and rolled back at once, hours before its approval would time out; the second
    keeps waiting."""
    api, epoch = scheduler_with_short_schedule[2], datetime(2000, 1, 1, tzinfo=timezone.utc)
    [ended, *_] = _wait_for("a finished run of twophase_recovery", lambda: [
        r[0] for r in _runs(api, "twophase_recovery", epoch) if r[1] == "success"], timeout=300)
    log = PostgresLog(pg_dsn)
    waiting = {}
    for asked_by in (ended, "manual__no-such-run"):
        spec = make_spec({"table": "core_tests.unused", "topic": unique_name.replace("_", "-")},
                         run_id=f"{unique_name}-{len(waiting)}", pipeline=RECOVERED)
        coordinator.begin(log, spec)
        log.transition(spec.load_id, State.PREPARED)
        approval.ask_approval(log, spec.load_id, timedelta(hours=3), run={"dag_id": "twophase_recovery",
                                                                          "run_id": asked_by})
        waiting[asked_by] = spec.load_id
    run_id = f"test__{unique_name}"
    api.trigger("twophase_recovery", run_id, {})
    assert api.wait_for_run("twophase_recovery", run_id, timeout=300) == "success"

    rejected = log.get(waiting[ended])
    assert rejected.state == State.ABORTED and "ended without an answer" in rejected.reason, rejected.reason
    assert rejected.approval["run_ended"] is True and rejected.approval["decision"] == "rejected"
    unknown = log.get(waiting["manual__no-such-run"])
    assert unknown.state == State.PREPARED
    coordinator.rollback(log, Connections.from_env(), unknown.load_id, reason="the test is over")
