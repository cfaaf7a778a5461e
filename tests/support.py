"""Helpers the tests share: sample loads, and reading a topic as a consumer would."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from twophase.ids import load_id_for
from twophase.spec import KafkaTarget, LoadSpec, PostgresTarget


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed", timeout: float = 30) -> list:
    """Every record of the topic visible at this isolation level, up to its end now."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=timeout)
    partitions = list(metadata.topics[topic].partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    records = []
    try:
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        idle = 0
        while ends and idle < 10:
            msgs = consumer.consume(num_messages=10000, timeout=1.0)
            idle = 0 if msgs else idle + 1
            for msg in msgs:
                if msg.error():
                    raise RuntimeError(msg.error())
                records.append(msg)
                if msg.offset() >= ends[msg.partition()] - 1:
                    ends.pop(msg.partition(), None)
            # read_committed stops at the last stable offset: a partition whose tail is
            # aborted or control records reaches its end through position, not records.
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    ends.pop(tp.partition, None)
    finally:
        consumer.close()
    return records


def header(msg, name: str) -> str | None:
    for key, value in msg.headers() or []:
        if key == name:
            return value.decode()
    return None


def make_spec(target, run_id=None, mode="append", replace_where=None, pipeline="core_tests") -> LoadSpec:
    """A load into the test's own table and topic; run_id defaults to one unique to the test."""
    run_id = run_id or target["topic"]
    return LoadSpec(
        load_id=load_id_for(pipeline, run_id), pipeline=pipeline, run_id=run_id,
        postgres=PostgresTarget(target["table"], mode, replace_where or {}),
        kafka=KafkaTarget(target["topic"], key_column="customer_id", partitions=3),
    )


def make_df(spark, rows: int, partitions: int = 4, day: str = "2026-11-20", revenue_scale: int = 1):
    from pyspark.sql import functions as F

    return (spark.range(rows, numPartitions=partitions)
            .select(F.format_string("c%06d", F.col("id")).alias("customer_id"),
                    F.lit(day).cast("date").alias("day"),
                    (F.col("id") % 7 + 1).cast("int").alias("orders"),
                    ((F.col("id") % 1000) * revenue_scale / 100).cast("decimal(12,2)").alias("revenue"),
                    F.when(F.col("id") % 5 == 0, F.lit(None)).when(F.col("id") % 5 == 1, F.lit(""))
                     .otherwise(F.lit('say "hi", ok')).alias("note")))
