"""One load, many targets: three tables over two databases (two of them fed by different
frames of the job) and two topics, committed or rolled back as one.

Counts are read back by independent readers (a fresh connection per database counting
rows by load_id, a read_committed consumer counting records by their load_id header),
never from the log.
"""

from __future__ import annotations

import json
import os

import psycopg2
import pytest

from support import count_table_rows, make_df, read_topic
from twophase import coordinator
from twophase.ids import load_id_for
from twophase.participants import participant_name
from twophase.participants.postgres import prepared_gids, staging_tables
from twophase.spec import Connections, KafkaTarget, LoadSpec, PostgresTarget
from twophase.states import State
from twophase.verify import verify
from twophase.voting import MinRows

ROWS = 400
REPORTING = "reporting"


@pytest.fixture(scope="module")
def reporting_dsn() -> str:
    dsn = os.environ.get("TWOPHASE_REPORTING_DSN")
    if not dsn:
        pytest.fail("TWOPHASE_REPORTING_DSN is not set: the stack's second database (eval \"$(scripts/stack env)\")")
    return dsn


@pytest.fixture
def many(pg_dsn, reporting_dsn, unique_name):
    """Fresh tables: per-customer and summary in the log's database, per-customer in the
    reporting database; two fresh topic names."""
    tables = {"orders": f"core_tests.{unique_name}", "summary": f"core_tests.{unique_name}_sum",
              "reporting": f"core_tests.{unique_name}_rep"}
    per_customer = """(customer_id text not null, day date not null, orders int not null, revenue numeric(12, 2),
                       note text, load_id text not null, primary key (customer_id, day))"""
    for dsn, names in ((pg_dsn, ("orders",)), (reporting_dsn, ("reporting",))):
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("create schema if not exists core_tests")
            for name in names:
                cur.execute(f"create table {tables[name]} {per_customer}")
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"create table {tables['summary']} (day date primary key, orders bigint not null, "
                    "customers bigint not null, load_id text not null)")
    topic = unique_name.replace("_", "-")
    return {**tables, "topic": topic, "topic2": f"{topic}-eu"}


def _spec(many: dict, run_id: str) -> LoadSpec:
    return LoadSpec(
        load_id=load_id_for("core_tests", run_id), pipeline="core_tests", run_id=run_id,
        targets=(PostgresTarget(many["orders"]), PostgresTarget(many["summary"], frame="summary"),
                 PostgresTarget(many["reporting"], connection=REPORTING),
                 KafkaTarget(many["topic"], "customer_id", partitions=2),
                 KafkaTarget(many["topic2"], "customer_id", partitions=3, value_columns=("customer_id", "orders"))))


def _frames(spark, rows: int) -> dict:
    from pyspark.sql import functions as F

    per_customer = make_df(spark, rows)
    summary = per_customer.agg(F.sum("orders").alias("orders"), F.count(F.lit(1)).alias("customers")) \
        .select(F.lit("2026-11-20").cast("date").alias("day"), "orders", "customers")
    return {"": per_customer, "summary": summary}


def _seen(many: dict, pg_dsn: str, reporting_dsn: str, conns: Connections, load_id: str) -> dict:
    """What independent readers see of the load in every target."""
    def records(topic):
        return sum(1 for m in read_topic(conns.kafka_bootstrap, topic)
                   if dict(m.headers() or []).get("load_id") == load_id.encode())
    return {"orders": count_table_rows(pg_dsn, many["orders"], load_id),
            "summary": count_table_rows(pg_dsn, many["summary"], load_id),
            "reporting": count_table_rows(reporting_dsn, many["reporting"], load_id),
            "topic": records(many["topic"]), "topic2": records(many["topic2"])}


def test_three_tables_in_two_databases_and_two_topics_commit_as_one(spark, txlog, pg_dsn, kafka_bootstrap,
                                                                     reporting_dsn, many):
    conns = Connections(pg_dsn, kafka_bootstrap, {REPORTING: ("postgres", reporting_dsn)})
    spec = _spec(many, many["topic"])
    assert [p.name for p in conns.participants(spec)] == ["postgres", participant_name("postgres", REPORTING),
                                                          "kafka"]
    coordinator.begin(txlog, spec)
    votes = coordinator.prepare(txlog, conns, spec.load_id, _frames(spark, ROWS))
    assert votes["postgres"].counts == {many["orders"]: ROWS, many["summary"]: 1}
    assert votes["postgres@reporting"].counts == {many["reporting"]: ROWS}
    assert votes["kafka"].counts == {many["topic"]: ROWS, many["topic2"]: ROWS}
    # Two prepared transactions, one per database, and nothing visible anywhere yet.
    gids = {v.committable["gid"] for v in votes.values() if "gid" in v.committable}
    assert len(gids) == 2 and gids <= set(prepared_gids(pg_dsn)) | set(prepared_gids(reporting_dsn))
    assert _seen(many, pg_dsn, reporting_dsn, conns, spec.load_id) == dict.fromkeys(
        ("orders", "summary", "reporting", "topic", "topic2"), 0)

    assert coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS)]).state == State.COMMITTING
    outcomes = coordinator.commit(txlog, conns, spec.load_id)
    assert [o.participant for o in outcomes] == ["kafka", "postgres", "postgres@reporting"], "may-fail commits first"
    assert txlog.get(spec.load_id).state == State.COMMITTED
    assert _seen(many, pg_dsn, reporting_dsn, conns, spec.load_id) == {
        "orders": ROWS, "summary": 1, "reporting": ROWS, "topic": ROWS, "topic2": ROWS}
    # The second topic's records hold only its value columns.
    record = next(m for m in read_topic(kafka_bootstrap, many["topic2"]))
    assert set(json.loads(record.value())) == {"customer_id", "orders"}
    [finding] = verify(txlog, conns, [txlog.get(spec.load_id)])
    assert finding.ok and finding.visible == {many["orders"]: ROWS, many["summary"]: 1, many["reporting"]: ROWS,
                                              many["topic"]: ROWS, many["topic2"]: ROWS}, finding
    assert spec.load_id not in staging_tables(pg_dsn).values() and spec.load_id not in staging_tables(
        reporting_dsn).values(), "every database's staging is dropped after the commit"


def test_a_gate_rollback_leaves_nothing_in_any_target(spark, txlog, pg_dsn, kafka_bootstrap, reporting_dsn, many):
    conns = Connections(pg_dsn, kafka_bootstrap, {REPORTING: ("postgres", reporting_dsn)})
    spec = _spec(many, f"{many['topic']}-gate")
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, _frames(spark, ROWS))
    decided = coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS + 1)])
    assert decided.state == State.ABORTING and f"{ROWS} rows, below the minimum of {ROWS + 1}" in decided.reason
    outcomes = {o.participant: o for o in coordinator.rollback(txlog, conns, spec.load_id)}
    assert outcomes["postgres"].counts["prepared_rows_discarded"] == ROWS + 1
    assert outcomes["postgres@reporting"].counts["prepared_rows_discarded"] == ROWS
    assert txlog.get(spec.load_id).state == State.ABORTED
    assert _seen(many, pg_dsn, reporting_dsn, conns, spec.load_id) == dict.fromkeys(
        ("orders", "summary", "reporting", "topic", "topic2"), 0)
    assert not [g for g in prepared_gids(pg_dsn) + prepared_gids(reporting_dsn) if spec.load_id in g]
    assert spec.load_id not in staging_tables(pg_dsn).values()
    assert spec.load_id not in staging_tables(reporting_dsn).values()
    [finding] = verify(txlog, conns, [txlog.get(spec.load_id)])
    assert finding.ok, finding


def test_a_frame_the_job_did_not_return_is_refused_before_anything_is_staged(spark, txlog, pg_dsn,
                                                                              kafka_bootstrap, reporting_dsn, many):
    conns = Connections(pg_dsn, kafka_bootstrap, {REPORTING: ("postgres", reporting_dsn)})
    spec = _spec(many, f"{many['topic']}-noframe")
    coordinator.begin(txlog, spec)
    with pytest.raises(ValueError, match=f"table {many['summary']} loads the job's frame 'summary', which the job "
                                         r"did not return \(it returned \[''\]\)"):
        coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 10))
    assert spec.load_id not in staging_tables(pg_dsn).values()
    coordinator.vote(txlog, conns, spec.load_id)
    coordinator.rollback(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTED
