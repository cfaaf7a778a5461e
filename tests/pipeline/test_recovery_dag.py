"""DAG twophase_recovery resolves a load a crash left in doubt, and says so in its log; a
load whose approval waits on a run that has ended is rejected and rolled back at once (the
task asks Airflow for the run's state)."""

from __future__ import annotations

from datetime import timedelta

import psycopg2

from support import make_spec
from twophase.connections import Connections
from twophase.gates import approval
from twophase.log import PostgresLog
from twophase.protocol import coordinator
from twophase.protocol.states import State


def test_recovery_dag_presumes_abort_of_a_stale_undecided_load_and_rejects_an_approval_nobody_can_answer(
        run_dag, pg_dsn, unique_name):
    table = f"core_tests.{unique_name}"
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("create schema if not exists core_tests")
        cur.execute(f"create table {table} (customer_id text, load_id text not null)")
    log = PostgresLog(pg_dsn)
    spec = make_spec({"table": table, "topic": unique_name.replace("_", "-")}, pipeline="recovery_dag_test")
    coordinator.begin(log, spec)
    # The begin task ran three hours ago and its DAG run died: nothing decided since.
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("update twophase.loads set began_at = now() - interval '3 hours' where load_id = %s",
                    (spec.load_id,))

    # Only the test's own pipeline: recovery of every pipeline would finish or sweep other
    # tests' loads under them (they run beside this one).
    run = run_dag({"deadline_minutes": 120, "pipeline": "recovery_dag_test"}, dag_id="twophase_recovery")

    assert run.state == "success", run.output[-3000:]
    load = log.get(spec.load_id)
    assert load.state == State.ABORTED and load.reason.startswith("presumed abort: no decision 120 min")
    assert f"{spec.load_id}: presumed abort" in run.task_log("recover")

    # A load waits for a person's approval, asked by a run that has since ended (here: the
    # recovery run above, a real finished run of Airflow's), and one asked by a run Airflow
    # does not know: the first is rejected and rolled back at once, hours before its
    # approval would time out; the second keeps waiting.
    orphaned, unknown = (make_spec({"table": table, "topic": unique_name.replace("_", "-")},
                                   run_id=f"{unique_name}-{waits}", pipeline="recovery_dag_test")
                         for waits in ("orphaned", "unknown"))
    for spec, run_id in ((orphaned, run.run_id), (unknown, "manual__no-such-run")):
        coordinator.begin(log, spec)
        log.transition(spec.load_id, State.PREPARED)
        approval.ask_approval(log, spec.load_id, timedelta(hours=3), run={"dag_id": "twophase_recovery",
                                                                          "run_id": run_id})
    again = run_dag({"deadline_minutes": 120, "pipeline": "recovery_dag_test"}, dag_id="twophase_recovery")

    assert again.state == "success", again.output[-3000:]
    load = log.get(orphaned.load_id)
    assert load.state == State.ABORTED and "ended without an answer" in load.reason, load.reason
    assert load.approval["run_ended"] is True and load.approval["decision"] == "rejected"
    assert f"{orphaned.load_id}: rejected, rolled back" in again.task_log("recover")
    assert log.get(unknown.load_id).state == State.PREPARED
    assert f"{unknown.load_id}: waiting" in again.task_log("recover")
    coordinator.rollback(log, Connections.from_env(), unknown.load_id, reason="the test is over")
