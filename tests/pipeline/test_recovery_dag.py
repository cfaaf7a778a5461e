"""DAG twophase_recovery resolves a load a crash left in doubt, and says so in its log."""

from __future__ import annotations

import psycopg2

from support import create_schema, make_spec
from twophase.log import PostgresLog
from twophase.protocol import coordinator
from twophase.protocol.states import State


def test_recovery_dag_presumes_abort_of_a_stale_undecided_load(run_dag, pg_dsn, unique_name):
    table = f"core_tests.{unique_name}"
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "core_tests")
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
