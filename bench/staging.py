"""Where the atomic load's staging pass spends its time, one side at a time.

The staging pass (twophase.spark.stage.stage) runs, in each Spark task, one mapInArrow
over the rows plus the columns the participants ask Spark to compute (a Kafka record's
key, JSON value and checksum), and hands every Arrow batch to every target's writer: the
Kafka producer, and the Postgres writer whose thread turns it into CSV for the COPY.
Here the same pass runs three more times with one writer each, the core's own:

- transfer: the batches, with the Kafka columns, reach Python and are only counted
  (Spark's to_json, Arrow conversion, the JVM-to-Python hop: the floor under any Python
  staging);
- postgres only: the Postgres participant's writer alone (CSV and COPY into a fresh
  unlogged staging table), without the Kafka columns;
- kafka only: the Kafka participant's writer alone (produce every record to a fresh
  staging topic: idempotent, acks=all, failures reported).

The real pass does both in the same task, so its time is roughly transfer +
(postgres only - transfer) + (kafka only - transfer), less what the COPY thread overlaps.
"""

from __future__ import annotations

import time

from twophase.participants.contract import PartitionWriter, Staging
from twophase.participants.kafka import KafkaParticipant
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresParticipant, drop_staging_table
from twophase.participants.postgres import PostgresTarget
from twophase.spark import stage as spark_stage

from . import scratch
from .data import KEY_COLUMN, Dataset

VARIANTS = ("transfer", "postgres_only", "kafka_only")


class _Count(PartitionWriter):
    def open(self, partition: int, attempt: str) -> None:
        self.rows = 0

    def write(self, batch) -> None:
        self.rows += batch.num_rows

    def close(self) -> dict:
        return {"rows": self.rows}


def _pass(data: Dataset, participant: str, staging: Staging) -> float:
    """One staging pass of data to one participant's writers; seconds."""
    started = time.perf_counter()
    staged = spark_stage.stage(data.df, {participant: staging})
    seconds = time.perf_counter() - started
    rows = sum(staged.expected.values())
    assert rows == data.rows, f"staging breakdown pass saw {rows} rows of {data.rows}"
    return seconds


def measure(data: Dataset, dsn: str, bootstrap: str) -> dict[str, float]:
    """Seconds of each variant (VARIANTS), each into fresh targets, removed afterwards."""
    name = scratch.new_name()
    seconds = {}
    topic = f"{scratch.TOPIC_PREFIX}{name}"
    kafka = KafkaParticipant(bootstrap, KafkaTarget(topic, KEY_COLUMN, partitions=scratch.PARTITIONS),
                             f"bench.staging.{name}")
    try:
        kafka_staging = kafka.stage({"": data.columns})
        seconds["transfer"] = _pass(data, "count", Staging({"count": _Count()},
                                                           columns={"count": kafka_staging.columns[topic]}))
        seconds["kafka_only"] = _pass(data, "kafka", kafka_staging)
    finally:
        scratch.delete_topics(bootstrap, [topic, *(t.staging_topic for t in kafka.topics)])
    table = scratch.create_table(dsn, data.shape, name)
    postgres = PostgresParticipant(dsn, PostgresTarget(table), f"bench.staging.{name}")
    try:
        seconds["postgres_only"] = _pass(data, "postgres", postgres.stage({"": data.columns}))
    finally:
        for staging in postgres.staging.values():
            drop_staging_table(dsn, staging.split(".", 1)[1])
        scratch.drop_table(dsn, table)
    return {v: seconds[v] for v in VARIANTS}
