"""The staging pass in the JVM (twophase/spark/jvm_stage.py) lands what the pass in Python
lands, and a task attempt that dies in it is retried without a duplicate.

The values: every Spark type the JVM's COPY writes, at its edges (NULL and the empty
string, quotes, separators, line breaks, non-ASCII text; the smallest and largest
integers; NaN and infinities; decimals wider than a long and below zero; dates before
1970, in the year 1 and 9999, a leap day; instants before 1970 to the microsecond; a
wall-clock time) through one load per pass, each committed: the tables' rows and the
topics' records must be equal, value for value.
"""

from __future__ import annotations

import logging
import math
from datetime import date, datetime, timezone
from decimal import Decimal

import psycopg2
import pytest

from support import create_schema, header, make_df, make_spec, read_topic, table_of
from twophase.participants.kafka import writer as kafka_writer
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spark import jvm_stage

COLUMNS = """customer_id text primary key, s text, tiny smallint, small smallint, i int, big bigint,
    flag boolean, f real, d double precision, wide numeric(38, 10), cents numeric(12, 2), day date,
    at timestamptz, wall timestamp, load_id text not null"""
SCHEMA = ("customer_id string, s string, tiny tinyint, small smallint, i int, big bigint, flag boolean, f float, "
          "d double, wide decimal(38,10), cents decimal(12,2), day date, at timestamp, wall timestamp_ntz")
UTC = timezone.utc
ROWS = [
    ("c1", None, None, None, None, None, None, None, None, None, None, None, None, None),
    ("c2", "", -128, -32768, -2147483648, -9223372036854775808, True, 1.1, math.nan,
     Decimal("-1234567890123456789012345678.0123456789"), Decimal("-0.05"), date(1, 1, 1),
     datetime(1969, 12, 31, 23, 59, 59, 999999, UTC), datetime(1, 1, 1, 0, 0, 0)),
    ("c3", 'say "hi", ok', 127, 32767, 2147483647, 9223372036854775807, False, -3.5e38, math.inf,
     Decimal("0.0000000001"), Decimal("9999999999.99"), date(9999, 12, 31),
     datetime(9999, 12, 31, 23, 59, 59, 999999, UTC), datetime(2026, 11, 20, 23, 30, 0, 250000)),
    ("c4", "two\nlines\r\nand a \\ backslash", 0, 0, 0, 0, True, 0.0, -math.inf, Decimal("0"), Decimal("0.00"),
     date(2024, 2, 29), datetime(1970, 1, 1, 0, 0, 0, tzinfo=UTC), datetime(1970, 1, 1)),
    ("c5", "ünïcödé ✓ 𝄞", 1, 1, 1, 1, False, 1e-45, 5e-324, Decimal("12.5"), Decimal("-123.40"),
     date(1969, 12, 31), datetime(1900, 3, 1, 12, 0, 0, 1, UTC), datetime(2000, 2, 29, 0, 0, 0, 1)),
    ("c6", "  spaces kept  ", 5, 5, 5, 5, True, -0.0, -0.0, Decimal("-0.0000000001"), Decimal("-9999999999.99"),
     date(2026, 11, 20), datetime(2026, 3, 8, 7, 0, 0, 1, UTC), datetime(2026, 3, 8, 2, 30)),
]


def _load(spark, txlog, conns, pg_dsn, name: str, df, monkeypatch, caplog, staging_pass: str):
    monkeypatch.setenv(jvm_stage.PASS_ENV, staging_pass)
    spec = make_spec({"table": f"core_tests.{name}", "topic": name.replace("_", "-")})
    coordinator.begin(txlog, spec)
    with caplog.at_level(logging.INFO, logger="twophase.spark.stage"):
        caplog.clear()
        coordinator.prepare(txlog, conns, spec.load_id, df)
    ran = "in the JVM" if "runs in the JVM" in caplog.text else "in Python"
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, spec.load_id)
    return spec, ran


def _table(dsn: str, table: str) -> list:
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select (to_jsonb(t) - 'load_id')::text from {table} t order by customer_id")
        return [row[0] for row in cur.fetchall()]


def _records(bootstrap: str, topic: str) -> list:
    return sorted((m.key(), m.value(), [name for name, _ in m.headers()]) for m in read_topic(bootstrap, topic))


def test_the_jvm_pass_lands_every_value_as_the_python_pass_does(spark, txlog, conns, pg_dsn, unique_name,
                                                                 monkeypatch, caplog):
    df = spark.createDataFrame(ROWS, SCHEMA).repartition(3)
    landed = {}
    for staging_pass in ("jvm", "python"):
        name = f"{unique_name}_{staging_pass}"
        with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
            create_schema(cur, "core_tests")
            cur.execute(f"create table core_tests.{name} ({COLUMNS})")
        spec, ran = _load(spark, txlog, conns, pg_dsn, name, df, monkeypatch, caplog, staging_pass)
        assert ran == ("in the JVM" if staging_pass == "jvm" else "in Python"), caplog.text
        landed[staging_pass] = (_table(pg_dsn, table_of(spec).table),
                                _records(conns.kafka_bootstrap, spec.targets[1].name))
    rows, records = landed["jvm"]
    assert len(rows) == len(ROWS) and len(records) == len(ROWS)
    assert rows == landed["python"][0]
    assert records == landed["python"][1]
    assert '"wide": -1234567890123456789012345678.0123456789' in rows[1] and '"day": "0001-01-01"' in rows[1]
    assert '"s": "two\\nlines\\r\\nand a \\\\ backslash"' in rows[3]


@pytest.mark.parametrize("point", ["spark.partition_midway", "spark.partition_staged"])
def test_a_task_attempt_that_dies_in_the_jvm_pass_is_retried_without_a_duplicate(
        point, spark, txlog, conns, pg_dsn, target, monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("TWOPHASE_FAILPOINT", point)
    monkeypatch.setenv("TWOPHASE_FAILPOINT_ONCE", str(tmp_path / "fired"))
    spec, ran = _load(spark, txlog, conns, pg_dsn, target["table"].split(".", 1)[1], make_df(spark, 400),
                      monkeypatch, caplog, "jvm")
    assert ran == "in the JVM" and (tmp_path / "fired").exists()
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select count(*), count(distinct customer_id) from {target['table']}")
        assert cur.fetchone() == (400, 400)
    records = read_topic(conns.kafka_bootstrap, target["topic"])
    assert len(records) == 400 and len({m.key() for m in records}) == 400
    assert {header(m, "load_id") for m in records} == {spec.load_id}


@pytest.mark.timeout(300)  # a permit never given back would hang the pass
def test_a_producer_allowed_one_record_in_flight_still_stages_them_all(spark, txlog, conns, pg_dsn, target,
                                                                     monkeypatch, caplog):
    # Each record waits for the one before it to be acknowledged: every delivery callback
    # gives its permit back, or the pass stops at its second record.
    monkeypatch.setattr(kafka_writer, "STAGING_MAX_IN_FLIGHT", 1)
    spec, ran = _load(spark, txlog, conns, pg_dsn, target["table"].split(".", 1)[1], make_df(spark, 300),
                      monkeypatch, caplog, "jvm")
    assert ran == "in the JVM"
    records = read_topic(conns.kafka_bootstrap, target["topic"])
    assert len(records) == 300 and len({m.key() for m in records}) == 300
    assert {header(m, "load_id") for m in records} == {spec.load_id}
