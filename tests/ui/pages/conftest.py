"""The loads a load's page and a pipeline's page are tested over, made once per run with
the core on the stack's servers: a pipeline of its own whose loads go into a Postgres
table, a Kafka topic and an Iceberg table, staged by Spark.

    committed    audited (two rules pass), rejected lines kept in the quarantine, committed
    approved     waited for a person's approval, approved, committed
    rolled_back  the audit's rule at error: ABORT, rolled back
    stuck        decided COMMIT, and nobody drives its commit (as after a commit task died)
    waiting      PREPARED, waiting for a person's approval

At the end the stuck load is committed and the waiting one rejected and rolled back, so
nothing stays in doubt; the tables and topics are left (their names are the run's own),
the Iceberg table is purged.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import psycopg2
import pytest
from fastapi.testclient import TestClient

from support import ICEBERG_COLUMNS, create_schema, drop_iceberg_table, make_df
from twophase.audit import RowCount, ValueRange
from twophase.connections import Connections
from twophase.gates import approval, audit_step
from twophase.gates.approval import ApprovalGate
from twophase.gates.audit_step import AuditGate
from twophase.gates.quarantine import Kept
from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spec import LoadSpec
from ui_auth import require_jwt_secret, viewer_token

ROWS = 200
REJECTED = {"not_json": [f'{{"order_id": "o{i}", oops' for i in range(4)],
            "negative amount": ['{"order_id": "n1", "amount": -3}']}
REJECTED_COUNTS = {"not_json": 14, "negative amount": 6}  # the job counts them all; the quarantine keeps some


@pytest.fixture(scope="session")
def client() -> TestClient:
    require_jwt_secret()
    from twophase_ui.app import app

    return TestClient(app)


@pytest.fixture(scope="session")
def token() -> str:
    require_jwt_secret()
    return viewer_token()


def _spec(pipeline: str, names: dict, run_id: str) -> LoadSpec:
    return LoadSpec(load_id=load_id_for(pipeline, run_id), pipeline=pipeline, run_id=run_id,
                    targets=(PostgresTarget(names["table"]), KafkaTarget(names["topic"], key_column="customer_id",
                                                                         partitions=3),
                             IcebergTarget(names["lake"], columns=ICEBERG_COLUMNS, partition_by=("day",))))


def _prepared(spark, log, conns, pipeline, names, run_id, day, metrics=None) -> str:
    spec = _spec(pipeline, names, run_id)
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, make_df(spark, ROWS, partitions=1, day=day), metrics=metrics)
    return spec.load_id


@pytest.fixture(scope="session")
def page_loads(spark, pg_dsn, kafka_bootstrap, iceberg_catalog):
    """{"pipeline", "table", "topic", "lake", the load id of each kind of load, and the
    committed load's rejected lines: "rejected" (kept) and "rejected_counts" (counted)}."""
    pipeline = f"ui_pages_{uuid.uuid4().hex[:8]}"
    names = {"table": f"ui_tests.{pipeline}", "topic": pipeline.replace("_", "-"), "lake": f"ui_tests.{pipeline}"}
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "ui_tests")
        cur.execute(f"""create table {names['table']} (customer_id text not null, day date not null,
                        orders int not null, revenue numeric(12, 2), note text, load_id text not null,
                        primary key (customer_id, day))""")
    log, conns = PostgresLog(pg_dsn), Connections(pg_dsn, kafka_bootstrap, iceberg_catalog=iceberg_catalog)
    rules = [RowCount(names["table"], error=(1, None)), ValueRange(names["table"], "orders", low=1, high=1000,
                                                                 error=(0, 0))]
    made = {**names, "pipeline": pipeline, "rejected": REJECTED, "rejected_counts": REJECTED_COUNTS}

    committed = _prepared(spark, log, conns, pipeline, names, "committed", "2026-11-01",
                          metrics={"input_lines": ROWS + 20, "rejected_lines": 20,
                                   "rejected_by_reason": REJECTED_COUNTS})
    log.quarantine(committed, [Kept(reason, "orders-1.jsonl", "the line is not what the job reads", line)
                               for reason, lines in REJECTED.items() for line in lines])
    audit_step.audit(log, conns, committed, rules)
    assert coordinator.vote(log, conns, committed, gates=[AuditGate(required=True)]).state == State.COMMITTING
    coordinator.commit(log, conns, committed)
    made["committed"] = committed

    approved = _prepared(spark, log, conns, pipeline, names, "approved", "2026-11-02")
    approval.ask_approval(log, approved, timedelta(minutes=30), {"dag_id": pipeline, "run_id": "approved"})
    approval.answer_approval(log, approved, True, datetime.now(timezone.utc), by="ui-test")
    assert coordinator.vote(log, conns, approved, gates=[ApprovalGate(required=True)]).state == State.COMMITTING
    coordinator.commit(log, conns, approved)
    made["approved"] = approved

    rolled_back = _prepared(spark, log, conns, pipeline, names, "rolled-back", "2026-11-03")
    audit_step.audit(log, conns, rolled_back, [RowCount(names["table"], error=(ROWS * 10, None))])
    assert coordinator.vote(log, conns, rolled_back, gates=[AuditGate(required=True)]).state == State.ABORTING
    coordinator.rollback(log, conns, rolled_back)
    made["rolled_back"] = rolled_back

    stuck = _prepared(spark, log, conns, pipeline, names, "stuck", "2026-11-04")
    assert coordinator.vote(log, conns, stuck).state == State.COMMITTING
    made["stuck"] = stuck

    waiting = _prepared(spark, log, conns, pipeline, names, "waiting", "2026-11-05")
    approval.ask_approval(log, waiting, timedelta(minutes=30), {"dag_id": pipeline, "run_id": "waiting"})
    made["waiting"] = waiting
    try:
        yield made
    finally:
        coordinator.commit(log, conns, stuck)
        approval.answer_approval(log, waiting, False, datetime.now(timezone.utc), by="ui-test")
        coordinator.vote(log, conns, waiting, gates=[ApprovalGate(required=True)])
        coordinator.rollback(log, conns, waiting)
        assert {log.get(made[k]).state for k in ("stuck", "waiting")} == {State.COMMITTED, State.ABORTED}
        drop_iceberg_table(names["lake"])
