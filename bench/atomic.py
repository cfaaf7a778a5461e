"""This project's atomic load, through the core (twophase.protocol.coordinator), one phase at a time:

    begin -> prepare -> vote -> commit (Kafka's copy, then Postgres' COMMIT PREPARED)

Prepare is also split into what runs inside it, by timing the core's own calls for the
duration of the load (the code is not changed, only wrapped):
  setup    both participants' stage(): staging table, topics;
  staging  the one Spark pass that streams every partition to both targets
           (spark_stage.stage: each Arrow batch to the COPY into the unlogged staging
           table and to the staging topic's producer, side by side in each task);
  pg_promote  Postgres' prepare: count the staged rows (publish attach: and build the
           table's keys on them); the vote's ready promotes them and PREPAREs (the
           key keeps its old name, so older reports render again).
  kafka_check Kafka's prepare: check the staged offset ranges.
Commit's per-participant times are the core's own (Outcome.seconds). Inside Kafka's:
  kafka_copy  the copy alone, from the copy's first record to its transaction's commit
           (the copy's and commit's calls of kafka/jvm_copy.JvmCopy or copy.PythonCopy):
           the JVM's start, its producer's transactions set up and the checks before the
           copy are outside it, as the producer tool's own records/s leaves out its start.

Each load goes to a fresh table and topic; afterwards the table, both topics, the copy's
consumer group and the load's rows in the transaction log are removed.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.log import TransactionLog
from twophase.participants.kafka import KafkaParticipant
from twophase.participants.kafka import KafkaTarget
from twophase.participants.kafka.copy import PythonCopy
from twophase.participants.kafka.jvm_copy import JvmCopy
from twophase.participants.postgres import PostgresParticipant
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.spark import stage as spark_stage
from twophase.spec import LoadSpec

from . import scratch
from .data import DAY_INTERVAL, KEY_COLUMN, Dataset

PHASES = ("begin", "prepare", "prepare.setup", "prepare.staging", "prepare.pg_promote", "prepare.kafka_check",
          "vote", "commit", "commit.kafka", "commit.kafka_copy", "commit.postgres", "load", "total")


@contextmanager
def _timing(t: dict):
    """Times the core's calls inside prepare, and the Kafka copy's, into t (summed over calls)."""
    wrapped = [(spark_stage, "stage", "prepare.staging"),
               (PostgresParticipant, "stage", "prepare.setup"), (KafkaParticipant, "stage", "prepare.setup"),
               (PostgresParticipant, "prepare", "prepare.pg_promote"),
               (KafkaParticipant, "prepare", "prepare.kafka_check"),
               *[(copier, step, "commit.kafka_copy")
                 for copier in (JvmCopy, PythonCopy) for step in ("copy", "commit")]]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in wrapped]

    def timed(call, key):
        def run(*args, **kwargs):
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                t[key] = t.get(key, 0.0) + time.perf_counter() - started
        return run

    for (owner, name, key), (_, _, call) in zip(wrapped, originals):
        setattr(owner, name, timed(call, key))
    try:
        yield
    finally:
        for owner, name, call in originals:
            setattr(owner, name, call)


def load(data: Dataset, conns: Connections, log: TransactionLog, publish: str = "insert") -> dict[str, float]:
    """One atomic load of data; seconds per phase (PHASES). `publish` "attach": into a
    table partitioned by day, the load's interval (docs/adr/0013); prepare.pg_promote is
    then the build of its primary key on staging, and the vote attaches it."""
    name = scratch.new_name()
    attach = publish == "attach"
    table = scratch.create_table(conns.pg_dsn, data.shape, name, partitioned=attach)
    topic = f"{scratch.TOPIC_PREFIX}{name}"
    kafka_target = KafkaTarget(topic, KEY_COLUMN, partitions=scratch.PARTITIONS)
    spec = LoadSpec(load_id=load_id_for(scratch.PIPELINE, name), pipeline=scratch.PIPELINE, run_id=name,
                    targets=(PostgresTarget(table, publish=publish), kafka_target),
                    data_interval=DAY_INTERVAL if attach else None)
    t: dict[str, float] = {}
    try:
        with _timing(t):
            started = time.perf_counter()
            coordinator.begin(log, spec)
            t["begin"] = time.perf_counter() - started
            mark = time.perf_counter()
            coordinator.prepare(log, conns, spec.load_id, data.df)
            t["prepare"] = time.perf_counter() - mark
            mark = time.perf_counter()
            decided = coordinator.vote(log, conns, spec.load_id)
            t["vote"] = time.perf_counter() - mark
            if decided.state.value != "COMMITTING":
                raise RuntimeError(f"the bench load was not decided COMMIT: {decided.state.value} {decided.reason}")
            mark = time.perf_counter()
            outcomes = coordinator.commit(log, conns, spec.load_id)
            t["commit"] = time.perf_counter() - mark
            t["total"] = time.perf_counter() - started
        t["load"] = t["prepare"] + t["vote"] + t["commit"]
        for outcome in outcomes:
            t[f"commit.{outcome.participant}"] = outcome.seconds
        kafka = next(o for o in outcomes if o.participant == "kafka")
        assert kafka.counts.get("records") == data.rows, f"Kafka commit copied {kafka.counts}, wanted {data.rows}"
        got = scratch.count_rows(conns.pg_dsn, table)
        assert got == data.rows, f"the atomic load committed {got} rows of {data.rows}"
        return t
    finally:
        scratch.settle(log, conns, spec.load_id)
        scratch.drop_table(conns.pg_dsn, table)
        scratch.delete_topics(conns.kafka_bootstrap, [topic, kafka_target.staging_topic])
        scratch.forget_load(conns.pg_dsn, conns.kafka_bootstrap, spec.load_id)
