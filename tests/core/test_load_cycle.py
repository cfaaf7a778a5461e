"""A whole load through the core against real Postgres, Kafka and Spark."""

from __future__ import annotations

import json

import psycopg2
import pytest

from support import create_schema, header, make_df, make_spec, participants, read_topic
from twophase.participants.postgres import is_prepared
from twophase.protocol import coordinator
from twophase.protocol.outcome import Kind
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows


def _pg_rows(dsn, table, load_id=None):
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select customer_id, day::text, orders, revenue::text, note, load_id from {table} "
                    "where %s::text is null or load_id = %s order by customer_id", (load_id, load_id))
        return cur.fetchall()


def _staging_exists(dsn, load_id):
    from twophase.ids import STAGING_SCHEMA, staging_table

    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("select to_regclass(%s)", (f"{STAGING_SCHEMA}.{staging_table(load_id)}",))
        return cur.fetchone()[0] is not None


def test_commit_makes_the_load_visible_on_both_sides(spark, txlog, conns, target):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    votes = coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 1000))
    assert {v.participant: (v.yes, v.count) for v in votes.values()} == {"postgres": (True, 1000), "kafka": (True, 1000)}
    assert _pg_rows(conns.pg_dsn, target["table"]) == [], "prepared rows must not be visible"
    assert read_topic(conns.kafka_bootstrap, target["topic"]) == [], "the target topic is untouched in prepare"

    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    outcomes = coordinator.commit(txlog, conns, spec.load_id)
    assert [(o.participant, o.kind) for o in outcomes] == [("kafka", Kind.DONE), ("postgres", Kind.DONE)]

    rows = _pg_rows(conns.pg_dsn, target["table"])
    assert len(rows) == 1000 and {r[5] for r in rows} == {spec.load_id}
    by_id = {r[0]: r for r in rows}
    assert by_id["c000000"][4] is None and by_id["c000001"][4] == "" and by_id["c000002"][4] == 'say "hi", ok'
    assert by_id["c000123"][1:4] == ("2026-11-20", 5, "1.23")

    records = read_topic(conns.kafka_bootstrap, target["topic"])
    assert len(records) == 1000
    assert {header(m, "load_id") for m in records} == {spec.load_id}
    assert all(header(m, "twophase.attempt") is None for m in records), "internal headers are not promoted"
    values = {m.key().decode(): json.loads(m.value()) for m in records}
    assert values["c000123"] == {"customer_id": "c000123", "day": "2026-11-20", "orders": 5, "revenue": 1.23,
                                 "note": 'say "hi", ok'}
    load = txlog.get(spec.load_id)
    assert load.state == State.COMMITTED and load.decision == "COMMIT" and load.expected_rows == 1000
    assert [t.to_state for t in txlog.history(spec.load_id)] == ["PREPARING", "PREPARED", "COMMITTING", "COMMITTED"]
    assert not _staging_exists(conns.pg_dsn, spec.load_id)


def test_retried_commit_is_already_done(spark, txlog, conns, target):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 200))
    coordinator.vote(txlog, conns, spec.load_id)
    coordinator.commit(txlog, conns, spec.load_id)
    parts = participants(spec, conns)
    votes = txlog.votes(spec.load_id)
    assert parts["kafka"].commit(votes["kafka"]).kind == Kind.ALREADY_DONE
    assert parts["postgres"].commit(votes["postgres"]).kind == Kind.ALREADY_DONE
    assert parts["postgres"].abort(None).kind == Kind.FAILED, "a committed load cannot be rolled back"
    assert parts["kafka"].abort(votes["kafka"]).kind == Kind.FAILED
    assert coordinator.commit(txlog, conns, spec.load_id) == []
    assert len(_pg_rows(conns.pg_dsn, target["table"])) == 200
    assert len(read_topic(conns.kafka_bootstrap, target["topic"])) == 200


def test_quality_gate_aborts_and_rollback_discards_everything(spark, txlog, conns, target):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 300))
    gid = txlog.votes(spec.load_id)["postgres"].committable["gid"]
    assert not is_prepared(conns.pg_dsn, gid), "prepare holds nothing: only the vote's ready() prepares"

    decided = coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(1000)])
    assert decided.state == State.ABORTING and "below the minimum of 1000" in decided.reason
    outcomes = coordinator.rollback(txlog, conns, spec.load_id)
    counts = {o.participant: (o.kind, o.counts) for o in outcomes}
    assert counts["postgres"] == (Kind.DONE, {"prepared_transaction": "none", "staged_rows_dropped": 300})
    assert counts["kafka"][0] == Kind.DONE and counts["kafka"][1]["staged_records_discarded"] == 300

    assert txlog.get(spec.load_id).state == State.ABORTED
    assert not is_prepared(conns.pg_dsn, gid)
    assert _pg_rows(conns.pg_dsn, target["table"]) == []
    assert read_topic(conns.kafka_bootstrap, target["topic"]) == []
    # retried: nothing left to do
    assert coordinator.rollback(txlog, conns, spec.load_id) == []
    parts = participants(spec, conns)
    assert parts["postgres"].abort(None).kind == Kind.ALREADY_DONE


def test_a_frame_missing_a_column_is_refused_before_anything_is_staged(spark, txlog, conns, target):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    bad = make_df(spark, 50).drop("orders")
    with pytest.raises(ValueError, match="lacks columns the targets need: \\['orders'\\] of table"):
        coordinator.prepare(txlog, conns, spec.load_id, bad)
    assert not _staging_exists(conns.pg_dsn, spec.load_id)
    decided = coordinator.vote(txlog, conns, spec.load_id)
    assert decided.state == State.ABORTING
    assert "prepare failed: SpecError: the DataFrame lacks columns the targets need: ['orders']" in decided.reason
    coordinator.rollback(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTED


def test_rollback_after_failed_prepare_drops_staging(spark, txlog, conns, target):
    from pyspark.sql import functions as F

    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    bad = make_df(spark, 50).withColumn("note", F.when(F.col("orders") == 3, F.lit("a\x00b")).otherwise(F.col("note")))
    with pytest.raises(Exception, match="NUL character"):
        coordinator.prepare(txlog, conns, spec.load_id, bad)
    assert _staging_exists(conns.pg_dsn, spec.load_id)
    decided = coordinator.vote(txlog, conns, spec.load_id)
    assert decided.state == State.ABORTING
    assert "prepare failed: StagingRefused: Postgres refused row" in decided.reason
    coordinator.rollback(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTED
    assert not _staging_exists(conns.pg_dsn, spec.load_id)


def test_timestamps_land_as_the_same_instants(spark, txlog, conns, pg_dsn, unique_name):
    """Zoned timestamps (staged as naive UTC for speed) and naive ones arrive exactly, to
    the microsecond, whatever Spark's session time zone, the Postgres sessions' time zone
    (Tokyo here, set on the connections) and across a DST change."""
    from pyspark.sql import functions as F

    from twophase.connections import Connections

    sep = "&" if "?" in pg_dsn else "?"
    tokyo = Connections(f"{pg_dsn}{sep}options=-c%20TimeZone%3DAsia%2FTokyo", conns.kafka_bootstrap)

    table = f"core_tests.{unique_name}"
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "core_tests")
        cur.execute(f"""create table {table} (customer_id text primary key, at timestamptz,
                        wall timestamp, load_id text not null)""")
    instants = {"c1": "2026-03-08T06:59:59.999999Z", "c2": "2026-03-08T07:00:00.000001Z",  # around New York's DST
                "c3": "1999-12-31T23:59:59.5Z", "c4": None}
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        df = spark.createDataFrame([(k, v) for k, v in instants.items()], "customer_id string, iso string").select(
            "customer_id", F.to_timestamp("iso").alias("at"),
            F.to_timestamp_ntz(F.lit("2026-11-20 23:30:00.25")).alias("wall"))
        spec = make_spec({"table": table, "topic": unique_name.replace("_", "-")})
        coordinator.begin(txlog, spec)
        coordinator.prepare(txlog, tokyo, spec.load_id, df)
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    assert coordinator.vote(txlog, tokyo, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, tokyo, spec.load_id)
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("set time zone 'Asia/Tokyo'")  # the reader's zone must not matter
        cur.execute(f"""select customer_id, to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                        wall::text from {table} order by customer_id""")
        rows = cur.fetchall()
    assert rows == [("c1", "2026-03-08T06:59:59.999999Z", "2026-11-20 23:30:00.25"),
                    ("c2", "2026-03-08T07:00:00.000001Z", "2026-11-20 23:30:00.25"),
                    ("c3", "1999-12-31T23:59:59.500000Z", "2026-11-20 23:30:00.25"),
                    ("c4", None, "2026-11-20 23:30:00.25")]
