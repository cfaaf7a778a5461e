"""Where the atomic load's staging pass spends its time, one side at a time.

The staging pass (twophase.spark_stage.stage) runs, in each Spark task, one mapInArrow
over the rows plus their Kafka key and JSON value; per Arrow batch it produces the
records to Kafka, then turns the batch into CSV for the partition's COPY. Here the same
select goes through mapInArrow three more times, with the core's own executor-side
classes, to split that time:

- transfer: the batches reach Python and are only counted (Spark's to_json, Arrow
  conversion, the JVM-to-Python hop: the floor under any Python staging);
- postgres only: + CSV and COPY into a fresh unlogged staging table (PartitionCopy and
  spark_stage's CSV stream, Kafka side stubbed out; keys and values are still turned
  into Python lists, as the real pass does);
- kafka only: + produce every record to a fresh topic (PartitionProducer: idempotent,
  acks=all, failures reported), no Postgres.

The real pass does both sides one after the other in the same task, so its time is
roughly transfer + (postgres only - transfer) + (kafka only - transfer).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from twophase import spark_stage
from twophase.participants.kafka import PartitionProducer
from twophase.participants.postgres import PartitionCopy, PostgresParticipant, drop_staging_table
from twophase.spec import PostgresTarget

from . import scratch
from .data import KEY_COLUMN, Dataset

VARIANTS = ("transfer", "postgres_only", "kafka_only")
_RESULT = pa.schema([("rows", pa.int64())])


def _result(rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"rows": rows}], schema=_RESULT)


def _part() -> int:
    from pyspark import TaskContext

    return TaskContext.get().partitionId()


class _Transfer:
    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield _result(sum(b.num_rows for b in batches))


class _NoKafka:
    def produce(self, keys, values, checksum) -> None:
        pass


@dataclass
class _PostgresOnly:
    pg: PartitionCopy
    columns: list[str]

    def __call__(self, batches):
        part = _part()
        self.pg.open(part)
        try:
            rows = self.pg.copy(spark_stage._CsvStream(batches, self.columns, part, _NoKafka()))
            self.pg.commit()
        finally:
            self.pg.close()
        yield _result(rows)


@dataclass
class _KafkaOnly:
    kafka: PartitionProducer

    def __call__(self, batches):
        self.kafka.open(_part(), uuid.uuid4().hex[:16])
        rows = 0
        for batch in batches:
            if batch.num_rows:
                self.kafka.produce(batch.column(spark_stage.KEY).to_pylist(),
                                   batch.column(spark_stage.VALUE).to_pylist(),
                                   pc.sum(batch.column(spark_stage.CRC)).as_py())
                rows += batch.num_rows
        self.kafka.flush()
        yield _result(rows)


def _pass(data: Dataset, function) -> float:
    """One mapInArrow pass over the same select as spark_stage.stage; seconds."""
    staged = spark_stage.staged_frame(data.df, data.columns, KEY_COLUMN)
    started = time.perf_counter()
    rows = sum(r.rows for r in staged.mapInArrow(function, "rows long").collect())
    seconds = time.perf_counter() - started
    assert rows == data.rows, f"staging breakdown pass saw {rows} rows of {data.rows}"
    return seconds


def measure(data: Dataset, dsn: str, bootstrap: str) -> dict[str, float]:
    """Seconds of each variant (VARIANTS), each into fresh targets, removed afterwards."""
    name = scratch.new_name()
    seconds = {"transfer": _pass(data, _Transfer())}
    table = scratch.create_table(dsn, data.shape, name)
    participant = PostgresParticipant(dsn, PostgresTarget(table), f"bench.staging.{name}")
    try:
        pg = participant.begin()
        seconds["postgres_only"] = _pass(data, _PostgresOnly(pg, pg.columns))
    finally:
        drop_staging_table(dsn, participant.staging.split(".", 1)[1])
        scratch.drop_table(dsn, table)
    topic = scratch.create_topic(bootstrap, name)
    try:
        seconds["kafka_only"] = _pass(data, _KafkaOnly(PartitionProducer(bootstrap, topic, f"bench.{name}", {})))
    finally:
        scratch.delete_topics(bootstrap, [topic])
    return seconds
