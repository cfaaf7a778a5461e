"""One schema for a frame's targets (twophase.schema) and how the DAG factory's kinds take
it (LoadConfig(schema=...)): the type names, the table it makes, the frame's differences
named one by one, and one schema per frame."""

from __future__ import annotations

import pytest

from twophase import schema
from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.spec import LoadSpec, SpecError
from twophase_airflow import IcebergTable, LoadConfig, Table, Topic

VIEWS = {"hour": "timestamp", "url": "string", "views": "bigint", "share": "decimal(5, 4)"}


@pytest.mark.parametrize("spelled, normal", [
    ("string", "string"), ("long", "bigint"), ("INTEGER", "int"), ("decimal(12, 2)", "decimal(12,2)"),
    (" timestamp ", "timestamp"), ("timestamp_ntz", "timestamp_ntz"), ("bool", "boolean"),
])
def test_each_type_has_one_spelling(spelled, normal):
    assert schema.normal_type(spelled) == normal


@pytest.mark.parametrize("bad", ["varchar", "decimal(40,2)", "decimal(2,3)", "array<int>", "", None])
def test_other_types_are_refused_naming_the_column(bad):
    with pytest.raises(SpecError, match="column 'c' has type .* which is not one of string, int, bigint"):
        schema.check({"c": bad}, "t")


@pytest.mark.parametrize("columns, message", [
    ({}, "a schema is {column: type} with at least one column"),
    ({"Hour": "date"}, "column 'Hour' is not a plain lower-case identifier"),
    ({"load_id": "string"}, "load_id is added by each target"),
])
def test_wrong_schemas_are_refused(columns, message):
    with pytest.raises(SpecError, match=message):
        schema.check(columns, "t")


def test_a_table_is_made_from_the_schema_with_load_id_and_its_key():
    assert schema.create_table_sql("web.views", schema.check(VIEWS, "t"), ("hour", "url")) == (
        "create schema if not exists web;\n"
        "create table if not exists web.views (\n"
        "    hour timestamptz not null,\n    url text not null,\n    views bigint,\n    share numeric(5,4),\n"
        "    load_id text not null,\n    primary key (hour, url)\n);")
    assert schema.iceberg_types(schema.check(VIEWS, "t")) == {
        "hour": "timestamptz", "url": "string", "views": "long", "share": "decimal(5, 4)"}
    assert schema.missing_columns_sql("web.views", schema.check(VIEWS, "t"), ["hour", "url"]) == [
        "alter table web.views add column views bigint", "alter table web.views add column share numeric(5,4)"]


def test_every_difference_of_a_frame_is_named():
    declared = schema.check(VIEWS, "t")
    assert schema.frame_problems(declared, [("hour", "timestamp"), ("url", "string"), ("views", "bigint"),
                                            ("share", "decimal(5,4)")], "f") == []
    problems = schema.frame_problems(declared, [("hour", "timestamp_ntz"), ("url", "string"), ("views", "int"),
                                                ("extra", "string")], "the job's frame")
    assert problems == [
        "the job's frame lacks column share (decimal(5,4)) of the schema",
        "the job's frame has column extra (string), which the schema does not declare: declare it, or leave it out "
        "of the frame",
        "the job's frame has column hour as timestamp_ntz, the schema declares timestamp: cast it in the job "
        "(F.col('hour').cast('timestamp'))",
        "the job's frame has column views as int, the schema declares bigint: cast it in the job "
        "(F.col('views').cast('bigint'))"]
    assert schema.frame_problems(declared, [(c, None) for c in VIEWS], "f") == []  # names only


def test_one_frame_has_one_schema():
    other = {**VIEWS, "extra": "string"}
    with pytest.raises(SpecError, match="targets web.a and web.b load the same frame '\\(the main one\\)' but "
                                        "declare different schemas"):
        LoadSpec("l", "p", "r", targets=(PostgresTarget("web.a", frame_schema=VIEWS),
                                         PostgresTarget("web.b", frame_schema=other)))
    spec = LoadSpec("l", "p", "r", targets=(PostgresTarget("web.a", frame_schema=VIEWS),
                                            PostgresTarget("web.b", frame="daily", frame_schema=other),
                                            KafkaTarget("views", "url")))
    assert schema.declared(spec.targets) == {"": schema.check(VIEWS, "t"), "daily": schema.check(other, "t")}
    assert LoadSpec.from_log({"participants": spec.to_log(), "load_id": "l", "pipeline": "p", "run_id": "r"}
                             ).targets == spec.targets


def test_load_config_gives_its_schema_to_every_target_of_the_main_frame():
    own = {"url": "string", "views": "bigint"}
    config = LoadConfig(targets=[
        Table("web.views", interval_column="hour", key=("hour", "url")), Topic("views", key_column="url"),
        IcebergTable("web.views", interval_column="hour"), Table("web.daily", frame="daily", interval_column=""),
        Topic("views-own", key_column="url", schema=own)], describe_input=lambda *_: {}, schema=VIEWS)
    table, topic, iceberg, daily, topic_own = (t.core("append", None, "") if t.kind == "kafka" else
                                               t.core("append", ("2026-11-20", "2026-11-21"), "")
                                               for t in config.targets)
    normal = schema.check(VIEWS, "t")
    assert table.frame_schema == topic.frame_schema == iceberg.frame_schema == normal
    assert config.ddl == [("twophase_postgres", schema.create_table_sql("web.views", normal, ("hour", "url")))]
    assert topic.value_columns == ("hour", "url", "views", "share")
    assert iceberg.columns == schema.iceberg_types(normal)
    assert daily.frame_schema == {} and topic_own.frame_schema == own and topic_own.value_columns == ("url", "views")


@pytest.mark.parametrize("table, message", [
    (lambda: LoadConfig(targets=[Table("web.v", key=("hour",))], describe_input=lambda *_: {}),
     "Table web.v key needs a schema"),
    (lambda: Table("web.v", schema={"url": "string"}, key=("hour",)), "key names \\['hour'\\], which are not columns"),
    (lambda: LoadConfig(targets=[Table("web.v")], describe_input=lambda *_: {}, schema={"Url": "string"}),
     "LoadConfig schema: column 'Url' is not a plain lower-case identifier"),
])
def test_a_wrong_key_or_schema_fails_where_the_dag_is_written(table, message):
    with pytest.raises(SpecError, match=message):
        table()


def test_an_iceberg_table_created_from_a_schema_needs_no_columns_of_its_own():
    target = IcebergTarget("web.views", frame_schema=VIEWS, partition_by=("hour",))
    assert target.columns == schema.iceberg_types(schema.check(VIEWS, "t"))
