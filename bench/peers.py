"""The peers, as users write today (non-atomic, no staging), and the input's scan floor.

- jdbc_default: df.write.jdbc into a fresh table, Spark's default options (batchsize 1000).
- jdbc_tuned: the same with reWriteBatchedInserts=true and batchsize 10000.
- kafka_writer: df.write.format("kafka") (spark-sql-kafka, producer defaults) to a fresh
  topic; key and value made exactly as the atomic load makes them.
- scan: df.write.format("noop"): reading the persisted input alone, the floor under
  every Spark contender (reported, not subtracted).

Each call times the write alone (the target is created before the clock starts), checks
the row count, and drops its table or topic.
"""

from __future__ import annotations

import time

from psycopg2.extensions import parse_dsn

from . import scratch
from .data import Dataset, kafka_records

JDBC_TUNED = {"reWriteBatchedInserts": "true", "batchsize": "10000"}


def jdbc_url(dsn: str) -> tuple[str, dict]:
    p = parse_dsn(dsn)
    url = f"jdbc:postgresql://{p.get('host', 'localhost')}:{p.get('port', 5432)}/{p['dbname']}"
    return url, {"user": p["user"], "password": p.get("password", ""), "driver": "org.postgresql.Driver"}


def scan(data: Dataset) -> float:
    started = time.perf_counter()
    data.df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def jdbc(data: Dataset, dsn: str, tuned: bool) -> float:
    with scratch.written_table(dsn, data.shape, data.rows, "JDBC") as table:
        url, props = jdbc_url(dsn)
        if tuned:
            props = {**props, **JDBC_TUNED}
        df = data.with_load_id()
        started = time.perf_counter()
        df.write.jdbc(url, table, mode="append", properties=props)
        return time.perf_counter() - started


def kafka(data: Dataset, bootstrap: str) -> float:
    topic = scratch.create_topic(bootstrap, scratch.new_name())
    try:
        records = kafka_records(data.df)
        started = time.perf_counter()
        (records.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).save())
        seconds = time.perf_counter() - started
        got = scratch.count_records(bootstrap, topic)
        assert got == data.rows, f"the Kafka writer wrote {got} records of {data.rows}"
        return seconds
    finally:
        scratch.delete_topics(bootstrap, [topic])
