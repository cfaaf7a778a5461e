"""Times one atomic load per size through the core: begin, prepare (staging to both
targets in one pass), vote, and each participant's commit.

    eval "$(scripts/stack env)"; python bench/core_phases.py --sizes 100000,1000000

Rows are shaped like the example pipeline's output. The DataFrame is generated, cached
and counted before the clock starts, so prepare is timed on staging alone. Each size
loads into a fresh table and topic, dropped afterwards.
"""

from __future__ import annotations

import argparse
import time
import uuid

import psycopg2

from twophase import coordinator
from twophase.ids import load_id_for
from twophase.log import TransactionLog
from twophase.spec import Connections, KafkaTarget, LoadSpec, PostgresTarget

DDL = """create table {table} (customer_id text not null, day date not null, orders int not null,
         revenue numeric(14, 2) not null, first_order_at timestamptz not null,
         last_order_at timestamptz not null, load_id text not null, primary key (day, customer_id))"""


def frame(spark, rows: int, partitions: int):
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=partitions).select(
        F.format_string("c%09d", "id").alias("customer_id"), F.lit("2026-11-20").cast("date").alias("day"),
        (F.col("id") % 40 + 1).cast("int").alias("orders"),
        ((F.col("id") % 100000) / 100).cast("decimal(14,2)").alias("revenue"),
        F.lit("2026-11-20 01:02:03").cast("timestamp").alias("first_order_at"),
        F.lit("2026-11-20 23:02:03").cast("timestamp").alias("last_order_at"))
    df = df.cache()
    df.count()
    return df


def one_load(spark, conns: Connections, log: TransactionLog, rows: int, partitions: int) -> dict:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    table = f"bench.{name}"
    with psycopg2.connect(conns.pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("create schema if not exists bench")
        cur.execute(DDL.format(table=table))
    spec = LoadSpec(load_id=load_id_for("bench", name), pipeline="bench", run_id=name,
                    postgres=PostgresTarget(table), kafka=KafkaTarget(name.replace("_", "-"), "customer_id"))
    df = frame(spark, rows, partitions)
    t = {}
    started = time.perf_counter()
    coordinator.begin(log, spec)
    t["begin"] = time.perf_counter() - started
    mark = time.perf_counter()
    coordinator.prepare(log, conns, spec.load_id, df)
    t["prepare"] = time.perf_counter() - mark
    mark = time.perf_counter()
    load = coordinator.vote(log, conns, spec.load_id)
    t["vote"] = time.perf_counter() - mark
    assert load.state.value == "COMMITTING", load.reason
    mark = time.perf_counter()
    outcomes = coordinator.commit(log, conns, spec.load_id)
    t["commit"] = time.perf_counter() - mark
    t["total"] = time.perf_counter() - started
    for outcome in outcomes:
        t[f"commit_{outcome.participant}"] = outcome.seconds
    df.unpersist()
    with psycopg2.connect(conns.pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select count(*) from {table}")
        assert cur.fetchone()[0] == rows
        cur.execute(f"drop table {table}")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[*]").appName("twophase-bench-core")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false").getOrCreate())
    conns = Connections.from_env()
    log = TransactionLog(conns.pg_dsn)
    log.ensure_schema()
    one_load(spark, conns, log, 1000, args.partitions)  # warm-up: JVM, Python workers, topics
    print("| rows | prepare s | staging rows/s (both targets, one pass) | vote s | Kafka commit s | Kafka commit records/s | Postgres commit ms | total s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rows in [int(x) for x in args.sizes.split(",")]:
        t = one_load(spark, conns, log, rows, args.partitions)
        print(f"| {rows:,} | {t['prepare']:.2f} | {rows / t['prepare']:,.0f} | {t['vote']:.2f} | "
              f"{t['commit_kafka']:.2f} | {rows / t['commit_kafka']:,.0f} | {t['commit_postgres'] * 1000:.1f} | "
              f"{t['total']:.2f} |", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
