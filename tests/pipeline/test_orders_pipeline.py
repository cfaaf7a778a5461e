"""The example pipeline end to end: real DAG runs over Spark, Postgres, Kafka and Iceberg.

Each test loads its own fresh day, so runs never meet in the shared table and topic.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import psycopg2
import pytest
from psycopg2.extensions import parse_dsn

from airflow_db import asset_events, clear_queue, queued_assets
from expected import expected_totals
from orders_sample.generate import generate
from support import header, iceberg_table, read_topic
from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.ops.verify import verify

TABLE, TOPIC = "analytics.customer_daily_totals", "customer-daily-totals"
SUMMARY = "analytics.orders_daily_summary"
LAKE = "analytics.customer_daily_totals"  # the Iceberg table of the stack's catalog
pytestmark = pytest.mark.slow


def loads_of_day(pg_dsn, day):
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select load_id, state, reason from twophase.loads where pipeline = 'orders_daily_totals' "
                    "and data_interval_start::date = %s order by began_at", (day,))
        return cur.fetchall()


def table_rows(pg_dsn, day):
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select to_regclass(%s)", (TABLE,))
        if cur.fetchone()[0] is None:
            return {}
        cur.execute(f"select customer_id, orders, revenue, first_order_at, last_order_at, load_id from {TABLE} "
                    "where day = %s", (day,))
        return {r[0]: r[1:] for r in cur.fetchall()}


def lake_rows(day) -> dict:
    """The Iceberg table's rows of the day, as a pyiceberg scan reads them."""
    from pyiceberg.expressions import EqualTo

    table = iceberg_table(LAKE)
    if table is None:
        return {}
    rows = table.scan(row_filter=EqualTo("day", day.isoformat())).to_arrow().to_pylist()
    return {r["customer_id"]: (r["orders"], r["revenue"], r["first_order_at"], r["last_order_at"], r["load_id"])
            for r in rows}


def topic_records(kafka_bootstrap, load_ids):
    return [m for m in read_topic(kafka_bootstrap, TOPIC) if header(m, "load_id") in set(load_ids)]


def folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(path.name.encode() + (path.read_bytes() if path.is_file() else b"/"))
    return digest.hexdigest()


def assert_verified(pg_dsn, kafka_bootstrap, day):
    """The CLI's independent check passes for every load of the day."""
    log = PostgresLog(pg_dsn)
    loads = [log.get(load_id) for load_id, _state, _reason in loads_of_day(pg_dsn, day)]
    findings = verify(log, Connections.from_env(), loads)
    assert findings and all(f.ok for f in findings), findings


def assert_exact_result(pg_dsn, kafka_bootstrap, folder, day, load_id):
    expected, _lines, _rejected = expected_totals(folder, day)
    rows = table_rows(pg_dsn, day)
    assert set(rows) == set(expected)
    for customer, t in expected.items():
        assert rows[customer] == (t.orders, t.revenue, t.first, t.last, load_id), customer
    assert lake_rows(day) == rows, "the Iceberg table's rows of the day differ from the Postgres table's"
    records = topic_records(kafka_bootstrap, [load_id])
    assert len(records) == len(expected)
    for m in records:
        value = json.loads(m.value(), parse_float=Decimal)
        t = expected[m.key().decode()]
        assert value["customer_id"] == m.key().decode() and value["day"] == day.isoformat()
        assert (value["orders"], value["revenue"]) == (t.orders, t.revenue)
        assert datetime.fromisoformat(value["first_order_at"]) == t.first
        assert datetime.fromisoformat(value["last_order_at"]) == t.last


def test_a_day_commits_exactly_on_both_sides(run_dag, orders_data, fresh_day, pg_dsn, stock_dsn, kafka_bootstrap):
    made = generate(orders_data / "landing", fresh_day, 5000, bad_share=0.02)
    clear_queue()
    run = run_dag({"date": fresh_day.isoformat(), "max_rejected_share": 0.05})
    assert run.state == "success", run.output[-4000:]
    [(load_id, state, _reason)] = loads_of_day(pg_dsn, fresh_day)
    assert state == "COMMITTED"
    assert_exact_result(pg_dsn, kafka_bootstrap, made.folder, fresh_day, load_id)

    # The commit emitted one asset per target with the load id, so the downstream DAG is due.
    events = asset_events(run.run_id)
    assert set(events) == {"postgres:" + TABLE, "postgres@twophase_stock:" + SUMMARY, "kafka:" + TOPIC,
                           "iceberg:" + LAKE}
    assert {e["load_id"] for e in events.values()} == {load_id}
    assert queued_assets() == {"postgres:" + TABLE, "kafka:" + TOPIC}

    expected, lines, rejected = expected_totals(made.folder, fresh_day)
    # The day's summary row, in the same load, on the stock server: its last resource.
    with psycopg2.connect(stock_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select orders, revenue, customers, rejected_lines, load_id from {SUMMARY} where day = %s",
                    (fresh_day,))
        assert cur.fetchall() == [(sum(t.orders for t in expected.values()),
                                   sum(t.revenue for t in expected.values()), len(expected), rejected, load_id)]
    assert rejected == made.bad_lines > 0
    assert (f"read {lines} lines in 4 files from file://{made.folder}: {lines - rejected} orders loaded, {rejected} rejected, "
            "0 duplicate deliveries skipped, 0 blank lines skipped") in run.task_log("prepare")
    assert ("Java functions twophase_example_fast_order, twophase_example_fast_event registered from"
            in run.task_log("prepare"))
    assert sum(1 for p in (orders_data / "rejects").rglob("*.json") for _ in p.open()) == rejected
    assert "DECISION: COMMIT" in run.task_log("vote") and "vote of kafka: YES" in run.task_log("vote")
    assert ("postgres@twophase_stock commits last, without a prepared transaction (its server has "
            "max_prepared_transactions = 0)") in run.task_log("vote")
    assert f"COMMITTED load {load_id}" in run.task_log("commit")
    # The whole run in one place: finish prints the load as `python -m twophase show` does.
    finish = run.task_log("finish")
    assert f"load {load_id}, as `python -m twophase show` prints it:" in finish
    assert "state     COMMITTED (decision COMMIT)" in finish
    assert "commit    postgres@twophase_stock commits last" in finish
    assert "PREPARED -> COMMITTING" in finish and "COMMITTING -> COMMITTED" in finish
    assert parse_dsn(pg_dsn)["password"] not in run.output, "the Postgres password leaked into a log"
    assert_verified(pg_dsn, kafka_bootstrap, fresh_day)


def test_quality_gate_rolls_back_and_fails_the_run(run_dag, orders_data, fresh_day, pg_dsn, stock_dsn,
                                                   kafka_bootstrap):
    made = generate(orders_data / "landing", fresh_day, 3000, bad_share=0.10)
    before = folder_digest(made.folder)
    run = run_dag({"date": fresh_day.isoformat(), "max_rejected_share": 0.05})
    assert run.state == "failed"
    # No event of this run, so nothing of it in the downstream DAG's queue (which other
    # tests' commits fill meanwhile: only the events say whose they are).
    assert asset_events(run.run_id) == {}, "a rollback emits no asset event"
    [(load_id, state, reason)] = loads_of_day(pg_dsn, fresh_day)
    assert state == "ABORTED" and "input lines rejected" in reason and "above the maximum of 5.00%" in reason
    assert table_rows(pg_dsn, fresh_day) == {} and lake_rows(fresh_day) == {}
    assert topic_records(kafka_bootstrap, [load_id]) == []
    with psycopg2.connect(stock_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select count(*) from {SUMMARY} where day = %s", (fresh_day,))
        assert cur.fetchone() == (0,), "the summary table got nothing either"
        cur.execute("select decision from twophase.decisions where load_id = %s", (load_id,))
        assert cur.fetchall() == [("ABORT",)], "the rollback claimed the last resource's ABORT marker first"
    assert folder_digest(made.folder) == before, "the input must be untouched"
    rollback = run.task_log("rollback")
    assert f"ROLLED BACK load {load_id}" in rollback and "input lines rejected" in rollback
    assert "rollback postgres: done" in rollback and "rollback kafka: done" in rollback
    # What was rejected, and where it really is: the job's rejects folder and the quarantine.
    assert f"rejected input lines: {made.bad_lines} (by reason: {{" in rollback
    assert f"the job wrote them to file://{orders_data}/rejects/date={fresh_day.isoformat()}/load={load_id}" in rollback
    assert f"the first 20 lines the quarantine kept (all of them: `python -m twophase show {load_id} --rejected`)" \
        in rollback
    assert f"load {load_id} ended ABORTED" in run.task_log("finish")
    assert "state     ABORTED (decision ABORT): quality gate:" in run.task_log("finish")
    assert_verified(pg_dsn, kafka_bootstrap, fresh_day)


def test_a_missing_input_folder_refuses_the_run_at_begin(run_dag, orders_data, fresh_day, pg_dsn):
    run = run_dag({"date": fresh_day.isoformat()})
    assert run.state == "failed"
    missing = f"files:file://{orders_data}/landing/date={fresh_day.isoformat()}: the folder does not exist"
    assert "cannot begin load " in run.task_log("begin") and missing in run.task_log("begin")
    assert "no load was begun: cannot begin load " in run.task_log("finish") and missing in run.task_log("finish")
    assert loads_of_day(pg_dsn, fresh_day) == [], "nothing was logged for the day"
    assert table_rows(pg_dsn, fresh_day) == {} and lake_rows(fresh_day) == {}


def test_empty_input_is_said_and_gated(run_dag, orders_data, fresh_day, pg_dsn):
    generate(orders_data / "landing", fresh_day, 0)
    run = run_dag({"date": fresh_day.isoformat()})
    assert run.state == "failed"
    assert "holds no order lines: the load has 0 rows" in run.task_log("prepare")
    [(_load_id, state, reason)] = loads_of_day(pg_dsn, fresh_day)
    assert state == "ABORTED" and reason == "quality gate: 0 rows, below the minimum of 1"


def test_a_committed_day_loads_once_and_replace_swaps_it(run_dag, orders_data, fresh_day, pg_dsn, kafka_bootstrap):
    landing = orders_data / "landing"
    generate(landing, fresh_day, 2000, bad_share=0.0)
    assert run_dag({"date": fresh_day.isoformat()}).state == "success"
    [(first_id, _state, _reason)] = loads_of_day(pg_dsn, fresh_day)
    rows_before = table_rows(pg_dsn, fresh_day)

    again = run_dag({"date": fresh_day.isoformat()})
    assert again.state == "success"
    assert f"was already committed by load {first_id}" in again.task_log("begin")
    assert "[DAG TEST] starting task_id=prepare" not in again.output
    assert len(loads_of_day(pg_dsn, fresh_day)) == 1 and table_rows(pg_dsn, fresh_day) == rows_before
    assert len(topic_records(kafka_bootstrap, [first_id])) == len(rows_before)

    made = generate(landing, fresh_day, 3000, bad_share=0.0, customers=150)
    replaced = run_dag({"date": fresh_day.isoformat(), "mode": "replace"})
    assert replaced.state == "success", replaced.output[-4000:]
    (_, s1, _), (second_id, s2, _) = loads_of_day(pg_dsn, fresh_day)
    assert (s1, s2) == ("COMMITTED", "COMMITTED")
    assert_exact_result(pg_dsn, kafka_bootstrap, made.folder, fresh_day, second_id)
    records = topic_records(kafka_bootstrap, [second_id])
    assert {(header(m, "twophase.mode"), header(m, "twophase.replaces")) for m in records} == {("replace", first_id)}
    assert "replaces " + first_id in replaced.task_log("begin")
    assert_verified(pg_dsn, kafka_bootstrap, fresh_day)
