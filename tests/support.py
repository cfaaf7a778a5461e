"""Helpers the tests share: sample loads, and reading a topic as a consumer would."""

from __future__ import annotations

import os
import random
import subprocess
import time
from datetime import date, timedelta
from pathlib import Path

import psycopg2

from twophase.ids import load_id_for
from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import KafkaTarget
from twophase.participants.kafka import iter_topic
from twophase.participants.postgres import PostgresTarget
from twophase.participants.postgres.server import creating
from twophase.spec import LoadSpec


def create_schema(cur, name: str) -> None:
    """CREATE SCHEMA IF NOT EXISTS, one test worker at a time (the product's own lock,
    server.creating): two at once can both find it missing, and the second fails on the
    catalog's unique index."""
    with creating(cur):
        cur.execute(f"create schema if not exists {name}")


def count_table_rows(dsn: str, table: str, load_id: str) -> int:
    """Rows of the load in the table, as any reader counts them (0 when the table is missing)."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("select to_regclass(%s)", (table,))
        if cur.fetchone()[0] is None:
            return 0
        cur.execute(f"select count(*) from {table} where load_id = %s", (load_id,))
        return cur.fetchone()[0]


def participants(spec, conns) -> dict:
    """The load's participants by name ("postgres", "kafka")."""
    from twophase.participants import participants_of

    return {p.name: p for p in participants_of(spec, conns)}


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed") -> list:
    """Every record of the topic visible at this isolation level, up to its end now."""
    return list(iter_topic(bootstrap, topic, isolation))


def topic_ends(bootstrap: str, topic: str, isolation: str) -> list[int]:
    """Each partition's end as a consumer of `isolation` sees it: read_committed sees the
    last stable offset, which stops at the first open transaction."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{topic}", "isolation.level": isolation})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
                for p in sorted(partitions)]
    finally:
        consumer.close()


def wait_settled(bootstrap: str, topic: str, timeout: float = 30) -> None:
    """Until no partition of the topic has a transaction in flight (its last stable offset
    is its end): a commit's markers reach the partitions a moment after commit_transaction
    returns, and read_committed readers see the records only then."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
    deadline = time.monotonic() + timeout
    while True:
        ends = []
        for isolation in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
            asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
            ends.append({tp.partition: f.result().offset
                         for tp, f in admin.list_offsets(asked, isolation_level=isolation).items()})
        if ends[0] == ends[1]:
            return
        assert time.monotonic() < deadline, f"topic {topic}: transactions still in flight after {timeout} s: {ends}"
        time.sleep(0.1)


def header(msg, name: str) -> str | None:
    for key, value in msg.headers() or []:
        if key == name:
            return value.decode()
    return None


def make_spec(target, run_id=None, mode="append", replace_where=None, pipeline=None) -> LoadSpec:
    """A load into the test's own table and topic; run_id and pipeline default to ones unique
    to the test (tests run side by side: a recovery of one test's pipeline, an interval
    busy in it or the pace of its earlier copies must never involve another's loads)."""
    run_id, pipeline = run_id or target["topic"], pipeline or target["topic"]
    return LoadSpec(
        load_id=load_id_for(pipeline, run_id), pipeline=pipeline, run_id=run_id,
        targets=(PostgresTarget(target["table"], mode, replace_where or {}),
                 KafkaTarget(target["topic"], key_column="customer_id", partitions=3)),
    )


def table_of(spec: LoadSpec) -> PostgresTarget:
    """The load's one table target."""
    [table] = [t for t in spec.targets if isinstance(t, PostgresTarget)]
    return table


def topic_of(spec: LoadSpec) -> KafkaTarget:
    """The load's one topic target."""
    [topic] = [t for t in spec.targets if isinstance(t, KafkaTarget)]
    return topic


def with_target(spec: LoadSpec, changed) -> LoadSpec:
    """The spec with the target of the same name replaced by `changed`."""
    import dataclasses

    return dataclasses.replace(spec, targets=tuple(changed if t.name == changed.name else t for t in spec.targets))


def make_df(spark, rows: int, partitions: int = 4, day: str = "2026-11-20", revenue_scale: int = 1):
    from pyspark.sql import functions as F

    return (spark.range(rows, numPartitions=partitions)
            .select(F.format_string("c%06d", F.col("id")).alias("customer_id"),
                    F.lit(day).cast("date").alias("day"),
                    (F.col("id") % 7 + 1).cast("int").alias("orders"),
                    ((F.col("id") % 1000) * revenue_scale / 100).cast("decimal(12,2)").alias("revenue"),
                    F.when(F.col("id") % 5 == 0, F.lit(None)).when(F.col("id") % 5 == 1, F.lit(""))
                     .otherwise(F.lit('say "hi", ok')).alias("note")))


ROOT = Path(__file__).resolve().parents[1]
ORDERS_PIPELINE = "orders_daily_totals"


def stack(*args: str, env: dict | None = None) -> str:
    """Run scripts/stack with args; its standard output."""
    return subprocess.run([str(ROOT / "scripts" / "stack"), *args], check=True, capture_output=True, text=True,
                          timeout=600, env=env).stdout


def orders_landing() -> Path:
    """The example pipeline's landing folder, as Airflow's tasks see it (ORDERS_DATA)."""
    return Path(os.environ.get("ORDERS_DATA", ROOT / ".stack" / "data" / "orders")) / "landing"


def fresh_day(pg_dsn: str, pipeline: str = ORDERS_PIPELINE, first: date = date(2040, 1, 1)) -> date:
    """A day no load of the pipeline (default: the daily example) has touched, from
    `first` on (a scheduler runs no run whose logical date is in the future: give a past
    `first` for a run it schedules with a logical date)."""
    rng = random.Random()
    today = date.today()
    span = (today - first).days - 1 if first < today else 30000  # a past `first`: days before yesterday
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select to_regclass('twophase.loads') is not null")
        logged = cur.fetchone()[0]
        for _ in range(100):
            day = first + timedelta(days=rng.randrange(span))
            if not logged:
                return day
            cur.execute("select 1 from twophase.loads where pipeline = %s and data_interval_start::date = %s",
                        (pipeline, day))
            if cur.fetchone() is None:
                return day
    raise AssertionError("no fresh day found")


REPORTING = "reporting"  # the connection name of the stack's second database in the core's tests


# The Iceberg table of many_spec: make_df's columns, partitioned by day (created by the load).
ICEBERG_COLUMNS = {"customer_id": "string", "day": "date", "orders": "int", "revenue": "decimal(12, 2)",
                   "note": "string"}


def many_spec(many: dict, run_id: str, pipeline: str | None = None) -> LoadSpec:
    """Three tables over two databases (the summary one fed by the frame "summary"), two
    topics and an Iceberg table: the targets of the `many` fixture (tests/core/conftest.py);
    the pipeline defaults to one of the test's own (its topic's name). With `many["last"]`,
    the reporting database commits as the load's last resource (docs/adr/0011)."""
    pipeline = pipeline or many["topic"]
    return LoadSpec(
        load_id=load_id_for(pipeline, run_id), pipeline=pipeline, run_id=run_id,
        targets=(PostgresTarget(many["orders"]), PostgresTarget(many["summary"], frame="summary"),
                 PostgresTarget(many["reporting"], connection=REPORTING,
                                prepared=False if many.get("last") else None),
                 KafkaTarget(many["topic"], "customer_id", partitions=2),
                 KafkaTarget(many["topic2"], "customer_id", partitions=3, value_columns=("customer_id", "orders")),
                 IcebergTarget(many["iceberg"], columns=ICEBERG_COLUMNS, partition_by=("day",))))


def many_frames(spark, rows: int) -> dict:
    """The job's two frames for many_spec: per customer (make_df), and one summary row."""
    from pyspark.sql import functions as F

    per_customer = make_df(spark, rows)
    summary = per_customer.agg(F.sum("orders").alias("orders"), F.count(F.lit(1)).alias("customers")) \
        .select(F.lit("2026-11-20").cast("date").alias("day"), "orders", "customers")
    return {"": per_customer, "summary": summary}


def many_seen(many: dict, pg_dsn: str, reporting_dsn: str, bootstrap: str, load_id: str) -> dict:
    """What independent readers see of the load in every target of many_spec."""
    def records(topic):
        return sum(1 for m in read_topic(bootstrap, topic) if header(m, "load_id") == load_id)
    return {"orders": count_table_rows(pg_dsn, many["orders"], load_id),
            "summary": count_table_rows(pg_dsn, many["summary"], load_id),
            "reporting": count_table_rows(reporting_dsn, many["reporting"], load_id),
            "topic": records(many["topic"]), "topic2": records(many["topic2"]),
            "iceberg": count_iceberg_rows(many["iceberg"], load_id)}


def iceberg_table(name: str):
    """The stack's Iceberg table `name` (a catalog of its own), or None."""
    from pyiceberg.exceptions import NoSuchTableError

    from twophase.participants.iceberg import catalog_of

    try:
        return catalog_of(os.environ["TWOPHASE_ICEBERG_CATALOG"]).load_table(name)
    except NoSuchTableError:
        return None


def count_iceberg_rows(name: str, load_id: str) -> int:
    """Rows of the load in the table's current snapshot, scanned by pyiceberg."""
    from pyiceberg.expressions import EqualTo

    table = iceberg_table(name)
    return 0 if table is None else table.scan(row_filter=EqualTo("load_id", load_id)).to_arrow().num_rows


def iceberg_leftovers(name: str, load_id: str, attempt: int = 1) -> list[str]:
    """Files of the Iceberg staging directory of the load's prepare attempt that no
    snapshot references."""
    from twophase.participants.iceberg import ABORTED_MARK, staging_dir
    from twophase.participants.iceberg.catalog import staged_files

    table = iceberg_table(name)
    if table is None:
        return []
    referenced = set(table.inspect.all_files().column("file_path").to_pylist()) if table.snapshots() else set()
    return [uri for uri in staged_files(staging_dir(table, load_id, attempt))
            if uri not in referenced and not uri.endswith("/" + ABORTED_MARK)]


def drop_iceberg_table(name: str) -> None:
    """Purge the table and delete its folder (test hygiene)."""
    from twophase.participants.iceberg import catalog_of
    from twophase.participants.iceberg.catalog import filesystem

    table = iceberg_table(name)
    if table is None:
        return
    location = table.location()
    catalog_of(os.environ["TWOPHASE_ICEBERG_CATALOG"]).purge_table(name)
    fs, path = filesystem(location)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass


def localstack(module: str):
    """A module of the local stack's own code (scripts/localstack), as scripts/stack runs it:
    e.g. localstack("kafka_cluster").pids() for the three brokers' processes."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module(f"localstack.{module}")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def jvm_confs() -> list[str]:
    """spark-submit's `--conf` arguments giving its driver and executors the JVM options of
    the stack's Spark connection (set by scripts/test: a short-lived JVM's start on less
    CPU), but the class archive, which holds the classes of the stack's Spark home only."""
    options = localstack("spark_home").driver_options_without_archive()
    return [a for jvm in ("driver", "executor") for a in ("--conf", f"spark.{jvm}.extraJavaOptions={options}")] \
        if options else []
