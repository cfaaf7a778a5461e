"""A run whose begin refuses the load ends failed, and its finish task says why; a day
already committed ends green and says "nothing to do". Real DAG runs (`airflow dags test`)
of the example pipeline against the stack's servers."""

from __future__ import annotations

import json
import socket
import uuid
from datetime import datetime, time, timedelta, timezone

import psycopg2
import pytest
from psycopg2.extensions import parse_dsn

from orders_sample.generate import generate
from support import ORDERS_PIPELINE
from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.spec import LoadSpec

pytestmark = pytest.mark.slow

TABLE, TOPIC = "analytics.customer_daily_totals", "customer-daily-totals"


def loads_of_day(pg_dsn, day) -> list[tuple[str, str]]:
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select load_id, state from twophase.loads where pipeline = %s "
                    "and data_interval_start::date = %s order by began_at", (ORDERS_PIPELINE, day))
        return cur.fetchall()


def task_states(run_id: str) -> dict[str, str]:
    """{task id: state} of a DAG run, from Airflow's metadata database."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(select(TaskInstance.task_id, TaskInstance.state)
                               .where(TaskInstance.dag_id == ORDERS_PIPELINE, TaskInstance.run_id == run_id)).all()
    return {task_id: str(state.value if hasattr(state, "value") else state) for task_id, state in rows}


def _midnight(day):
    return datetime.combine(day, time(0), tzinfo=timezone.utc).isoformat()


def test_a_second_run_of_a_day_in_flight_fails_and_finish_says_why(run_dag, orders_data, fresh_day, pg_dsn,
                                                                   kafka_bootstrap):
    generate(orders_data / "landing", fresh_day, 100, bad_share=0.0)
    # Another load of the same day, begun in the log and still PREPARING (as a concurrent run's is).
    run_id = f"test-in-flight-{uuid.uuid4().hex[:8]}"
    txlog = PostgresLog(pg_dsn)
    other = coordinator.begin(txlog, LoadSpec(
        load_id=load_id_for(ORDERS_PIPELINE, run_id), pipeline=ORDERS_PIPELINE, run_id=run_id,
        targets=(PostgresTarget(TABLE), KafkaTarget(TOPIC, "customer_id")),
        data_interval=(_midnight(fresh_day), _midnight(fresh_day + timedelta(days=1)))))
    try:
        run = run_dag({"date": fresh_day.isoformat()})
        assert run.state == "failed", run.output[-4000:]
        assert task_states(run.run_id) == {"begin": "failed", "prepare": "upstream_failed", "audit": "upstream_failed",
                                           "approve": "upstream_failed",
                                           "vote": "skipped", "commit": "skipped", "rollback": "skipped",
                                           "finish": "failed"}
        busy = f"load {other.load_id} of the same data interval is PREPARING: wait for it to end"
        assert busy in run.task_log("begin"), run.task_log("begin")[-3000:]
        assert "no load was begun: cannot begin load " in run.task_log("finish") and busy in run.task_log("finish")
        assert loads_of_day(pg_dsn, fresh_day) == [(other.load_id, "PREPARING")], "the refused run logged nothing"
    finally:
        coordinator.rollback(txlog, Connections.from_env(), other.load_id, reason="test cleanup")


def test_an_already_committed_day_is_green_and_finish_says_nothing_to_do(run_dag, orders_data, fresh_day, pg_dsn):
    generate(orders_data / "landing", fresh_day, 300, bad_share=0.0)
    first = run_dag({"date": fresh_day.isoformat()})
    assert first.state == "success", first.output[-4000:]
    [(committed_id, state)] = loads_of_day(pg_dsn, fresh_day)
    assert state == "COMMITTED"

    again = run_dag({"date": fresh_day.isoformat(), "mode": "append"})
    assert again.state == "success", again.output[-4000:]
    assert task_states(again.run_id) == {"begin": "success", "prepare": "skipped", "audit": "skipped", "approve": "skipped",
                                         "vote": "skipped",
                                         "commit": "skipped", "rollback": "skipped", "finish": "success"}
    finish = again.task_log("finish")
    assert "nothing to do: the data interval starting" in finish
    assert f"was already committed by load {committed_id}" in finish
    assert loads_of_day(pg_dsn, fresh_day) == [(committed_id, "COMMITTED")]


def test_unreachable_postgres_fails_the_run_with_one_readable_line(run_dag, fresh_day, pg_dsn, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fake_password = f"not-a-real-password-{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW_CONN_TWOPHASE_POSTGRES", json.dumps({
        "conn_type": "postgres", "host": "127.0.0.1", "port": port, "login": "twophase",
        "password": fake_password, "schema": "twophase"}))
    run = run_dag({"date": fresh_day.isoformat()})
    assert run.state == "failed", run.output[-4000:]
    states = task_states(run.run_id)
    assert (states["begin"], states["prepare"], states["finish"]) == ("failed", "upstream_failed", "failed")
    unreachable = (f"cannot reach Postgres (Airflow connection 'twophase_postgres'): connection to server at "
                   f"\"127.0.0.1\", port {port} failed: Connection refused")
    assert unreachable in run.task_log("begin")
    assert "no load was begun: " + unreachable in run.task_log("finish")
    assert fake_password not in run.output and parse_dsn(pg_dsn)["password"] not in run.output
    assert loads_of_day(pg_dsn, fresh_day) == []
