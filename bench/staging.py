"""Where the atomic load's staging pass spends its time, one side at a time, and what the
same pass costs in Python.

The staging pass (twophase.spark.stage.stage) runs, in each Spark task, one pass over the
rows plus the columns the participants ask Spark to compute (a Kafka record's key, JSON
value and checksum), and hands every row to every target's writer: in the executors' JVM
for Postgres and Kafka (twophase/spark/jvm_stage.py, ADR 0015), else in Python
(mapInArrow). Here the same pass runs three more times:

- postgres only: the Postgres participant's writer alone (COPY into a fresh unlogged
  staging table), without the Kafka columns, as stage() runs it (in the JVM);
- kafka only: the Kafka participant's writer alone (produce every record to a fresh
  staging topic: idempotent, acks=all, failures reported), as stage() runs it;
- python pass: both writers, with TWOPHASE_STAGING_PASS=python: the pass as it ran
  before the JVM's (rows to a Python worker as Arrow, pyarrow's CSV, one librdkafka call
  per record), the baseline of the JVM pass in the same run.
"""

from __future__ import annotations

import os
import time

from twophase.participants.kafka import KafkaParticipant
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresParticipant, drop_staging_table
from twophase.participants.postgres import PostgresTarget
from twophase.participants.contract import Staging
from twophase.spark import jvm_stage
from twophase.spark import stage as spark_stage

from . import scratch
from .data import KEY_COLUMN, Dataset

VARIANTS = ("python_pass", "postgres_only", "kafka_only")


def _pass(data: Dataset, stagings: dict[str, Staging], staging_pass: str) -> float:
    """One staging pass of data to the participants' writers (`staging_pass`: "jvm", or
    "python" for TWOPHASE_STAGING_PASS=python); seconds."""
    before = os.environ.get(jvm_stage.PASS_ENV)
    os.environ[jvm_stage.PASS_ENV] = staging_pass
    try:
        started = time.perf_counter()
        staged = spark_stage.stage(data.df, stagings)
        seconds = time.perf_counter() - started
    finally:
        os.environ.pop(jvm_stage.PASS_ENV)
        if before is not None:
            os.environ[jvm_stage.PASS_ENV] = before
    counted = set(staged.expected.values())
    assert counted == {data.rows}, f"staging breakdown pass saw {counted} rows of {data.rows}"
    return seconds


def _into_fresh_targets(data: Dataset, dsn: str, bootstrap: str, kinds: tuple[str, ...], staging_pass: str) -> float:
    """One pass into a fresh table and/or topic (`kinds`), removed afterwards; seconds."""
    name = scratch.new_name()
    topic = f"{scratch.TOPIC_PREFIX}{name}"
    kafka = KafkaParticipant(bootstrap, KafkaTarget(topic, KEY_COLUMN, partitions=scratch.PARTITIONS),
                             f"bench.staging.{name}")
    table = scratch.create_table(dsn, data.shape, name) if "postgres" in kinds else None
    postgres = PostgresParticipant(dsn, PostgresTarget(table), f"bench.staging.{name}") if table else None
    try:
        stagings = {}
        if "kafka" in kinds:
            stagings["kafka"] = kafka.stage({"": data.columns})
        if postgres is not None:
            stagings["postgres"] = postgres.stage({"": data.columns})
        return _pass(data, stagings, staging_pass)
    finally:
        if "kafka" in kinds:
            scratch.delete_topics(bootstrap, [topic, *(t.staging_topic for t in kafka.topics)])
        if postgres is not None:
            for staging in postgres.staging.values():
                drop_staging_table(dsn, staging.split(".", 1)[1])
            scratch.drop_table(dsn, table)


def measure(data: Dataset, dsn: str, bootstrap: str) -> dict[str, float]:
    """Seconds of each variant (VARIANTS), each into fresh targets."""
    return {"python_pass": _into_fresh_targets(data, dsn, bootstrap, ("postgres", "kafka"), "python"),
            "postgres_only": _into_fresh_targets(data, dsn, bootstrap, ("postgres",), "jvm"),
            "kafka_only": _into_fresh_targets(data, dsn, bootstrap, ("kafka",), "jvm")}
