"""The staging pass: stream each of a job's frames once, from the executors, to the
writers of every target it feeds.

Each Spark partition streams through once, as Arrow batches (mapInArrow), and every batch
is handed to the PartitionWriter of every target its frame feeds (the participant
contract); or, where every writer of the frame has a JVM form (Postgres, Kafka), the
rows go to those in the executors' JVM without reaching Python (jvm_stage.py). No data row
reaches the driver; the driver gets, per partition and target, the writer's small report
from successful task attempts only.

Columns the participants asked for (Staging.columns, Spark SQL expressions: a Kafka
record's key, value and checksum) are computed in the JVM by the same select, so writers
do no per-row work Spark can do.

Works on a cluster: ship this package with --py-files; executors need network access to
the participants' servers, nothing else.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from .. import failpoints
from ..participants.contract import PartitionWriter, Staging
from . import jvm_stage

# One small row per partition and target.
RESULT_SCHEMA = "part int, attempt string, rows long, participant string, target string, report string"
_RESULT_ARROW = pa.schema([("part", pa.int32()), ("attempt", pa.string()), ("rows", pa.int64()),
                          ("participant", pa.string()), ("target", pa.string()), ("report", pa.string())])


def stage_partition(writers: list[PartitionWriter], part: int, attempt: str, batches: Iterable[pa.RecordBatch],
                    after_first_batch: Callable[[], None] = lambda: None) -> tuple[int, list[dict]]:
    """One attempt of one partition: open every writer, hand each non-empty batch to all,
    close all; on any failure discard every writer opened and raise. (rows, reports)."""
    opened: list[PartitionWriter] = []
    rows = 0
    try:
        for writer in writers:
            writer.open(part, attempt)
            opened.append(writer)
        for batch in batches:
            if not batch.num_rows:
                continue
            for writer in opened:
                writer.write(batch)
            rows += batch.num_rows
            if rows == batch.num_rows:
                after_first_batch()
        reports = [writer.close() for writer in opened]
    except BaseException:
        for writer in opened:
            writer.discard()
        raise
    return rows, reports


@dataclass
class StagePartition:
    """The function mapInArrow runs on each partition (pickled to the executors).
    `writers`: (participant, target, writer) for every target of the load."""

    writers: list[tuple[str, str, PartitionWriter]]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        attempt = uuid.uuid4().hex[:16]  # unique across retries, stages and Spark applications
        rows, reports = stage_partition([w for _, _, w in self.writers], part, attempt, batches,
                                        lambda: failpoints.hit("spark.partition_midway"))
        failpoints.hit("spark.partition_staged")
        yield pa.RecordBatch.from_pylist([
            {"part": part, "attempt": attempt, "rows": rows, "participant": participant, "target": target,
             "report": json.dumps(report)}
            for (participant, target, _), report in zip(self.writers, reports)], schema=_RESULT_ARROW)


@dataclass(frozen=True)
class Staged:
    """What the pass staged: Spark's row count per target, and per participant and target
    the successful attempts' reports (each with its `part` and `attempt`)."""

    expected: dict[str, int]
    reports: dict[str, dict[str, list[dict]]]


def frames_of(df) -> dict:
    """The job's output as {frame name: DataFrame}: one DataFrame is the main frame ('')."""
    return dict(df) if isinstance(df, dict) else {"": df}


def stage(df, stagings: dict[str, Staging]) -> Staged:
    """Stream each of the job's frames (`df`: a DataFrame, or {frame name: DataFrame})
    once to the writers of the targets it feeds (`stagings`: {participant: its Staging})."""
    from pyspark.sql import functions as F

    frames = frames_of(df)
    expected: dict[str, int] = {}
    reports: dict[str, dict[str, list[dict]]] = {p: {t: [] for t in s.writers} for p, s in stagings.items()}
    for frame_name, frame in frames.items():
        writers = [(participant, target, writer) for participant, staging in stagings.items()
                   for target, writer in staging.writers.items() if staging.frame_of(target) == frame_name]
        if not writers:
            continue
        extra = {name: sql for participant, staging in stagings.items() for target in staging.writers
                 if staging.frame_of(target) == frame_name for name, sql in staging.columns.get(target, {}).items()}
        selected = frame.select("*", *[F.expr(sql).alias(name) for name, sql in extra.items()]) if extra else frame
        rows = jvm_stage.run(selected, writers)
        if rows is None:
            rows = selected.mapInArrow(StagePartition(writers), RESULT_SCHEMA).collect()
        expected.update({target: 0 for _, target, _ in writers})
        for r in rows:
            expected[r.target] += r.rows
            reports[r.participant][r.target].append({"part": r.part, "attempt": r.attempt, **json.loads(r.report)})
    return Staged(expected, reports)
