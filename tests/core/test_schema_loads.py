"""One schema for every target (twophase.schema), against the stack: a table made from it,
an Iceberg table created from it and a topic whose values hold its columns in its order
commit one load; a frame that adds, drops or retypes a column is refused before anything
is staged, naming each difference; a table or an Iceberg table that lacks a column of the
schema is refused, naming the statement that adds it, with nothing written."""

from __future__ import annotations

import json
import re

import psycopg2
import pytest
from pyspark.sql import functions as F

from support import count_iceberg_rows, count_table_rows, drop_iceberg_table, header, make_df, read_topic
from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget, staging_tables
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.participants.iceberg.catalog import catalog_of, load_table
from twophase.schema import create_table_sql, iceberg_types
from twophase.spec import LoadSpec

ROWS = 120
# make_df's columns, in another order than the frame's: the topic's values follow the schema.
SCHEMA = {"day": "date", "customer_id": "string", "orders": "int", "revenue": "decimal(12,2)", "note": "string"}


def _query(dsn: str, sql: str):
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall() if cur.description else None


@pytest.fixture
def declared(pg_dsn, kafka_bootstrap, iceberg_catalog, unique_name):
    """A spec whose three targets declare SCHEMA (the table made from it, as begin's DDL
    does), and its connections."""
    table, iceberg = f"core_tests.{unique_name}", f"core_tests.{unique_name}"
    _query(pg_dsn, create_table_sql(table, SCHEMA, key=("day", "customer_id")))
    pipeline = f"schema_{unique_name}"[:60]
    spec = LoadSpec(load_id=load_id_for(pipeline, unique_name), pipeline=pipeline, run_id=unique_name, targets=(
        PostgresTarget(table, frame_schema=SCHEMA), KafkaTarget(unique_name.replace("_", "-"), "customer_id",
                                                                frame_schema=SCHEMA),
        IcebergTarget(iceberg, frame_schema=SCHEMA)))
    yield spec, Connections(pg_dsn, kafka_bootstrap, iceberg_catalog=iceberg_catalog)
    drop_iceberg_table(iceberg)


def test_a_load_whose_targets_follow_one_schema_commits_in_each(spark, txlog, pg_dsn, kafka_bootstrap, declared):
    spec, conns = declared
    coordinator.begin(txlog, spec, conns)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, spec.load_id)
    table, topic, iceberg = spec.targets
    assert count_table_rows(pg_dsn, table.table, spec.load_id) == ROWS
    assert count_iceberg_rows(iceberg.table, spec.load_id) == ROWS
    [(columns,)] = _query(pg_dsn, f"select array_agg(column_name::text order by ordinal_position) from "
                                  f"information_schema.columns where table_schema || '.' || table_name = '{table.table}'")
    assert columns == [*SCHEMA, "load_id"]
    records = [m for m in read_topic(kafka_bootstrap, topic.topic) if header(m, "load_id") == spec.load_id]
    values = [json.loads(m.value()) for m in records]  # every column, in the schema's order, nulls as null
    assert len(values) == ROWS and all(list(v) == list(SCHEMA) for v in values)
    assert sum(v["note"] is None for v in values) == ROWS // 5


@pytest.mark.parametrize("change, named", [
    (lambda df: df.withColumn("extra", F.lit(1)), "has column extra \\(int\\), which the schema does not declare"),
    (lambda df: df.drop("note"), "lacks column note \\(string\\) of the schema"),
    (lambda df: df.withColumn("orders", F.col("orders").cast("bigint")),
     "has column orders as bigint, the schema declares int: cast it in the job"),
])
def test_a_frame_that_differs_from_the_schema_is_refused_naming_it_with_nothing_staged(
        spark, txlog, pg_dsn, declared, change, named):
    spec, conns = declared
    coordinator.begin(txlog, spec, conns)
    with pytest.raises(Exception, match=named):
        coordinator.prepare(txlog, conns, spec.load_id, change(make_df(spark, ROWS)))
    load = txlog.get(spec.load_id)
    assert "does not match the load's schema" in load.prepare_error and re.search(named, load.prepare_error)
    assert txlog.votes(spec.load_id) == {}
    assert spec.load_id not in staging_tables(pg_dsn).values()
    coordinator.rollback(txlog, conns, spec.load_id, reason="the test is over")


@pytest.mark.parametrize("lacking", ["table", "iceberg"])
def test_targets_that_lack_a_column_of_the_schema_are_refused_naming_it(spark, txlog, pg_dsn, iceberg_catalog,
                                                                        declared, lacking):
    spec, conns = declared
    table, _, iceberg = spec.targets
    if lacking == "table":
        _query(pg_dsn, f"alter table {table.table} drop column note")
        named = f"table {table.table} lacks column.*alter table {table.table} add column note text"
    else:  # an Iceberg table made before the schema had `note`
        load_table(catalog_of(iceberg_catalog), IcebergTarget(iceberg.table, columns={
            c: t for c, t in iceberg_types(SCHEMA).items() if c != "note"}))
        named = rf"iceberg table {iceberg.table} lacks column\(s\) \['note'\] of the load's schema"
    coordinator.begin(txlog, spec, conns)
    with pytest.raises(Exception, match=named):
        coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    coordinator.rollback(txlog, conns, spec.load_id, reason="the test is over")
    assert count_table_rows(pg_dsn, table.table, spec.load_id) == 0
    assert count_iceberg_rows(iceberg.table, spec.load_id) == 0
