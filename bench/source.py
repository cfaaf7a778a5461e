"""The Kafka source through a whole load beside Spark's plain Kafka batch read, and where a
small load's seconds go (issue 25).

    python -m bench.source [--events 1000000] [--small 1000] [--reps 2]

Needs the stack: scripts/stack up; eval "$(scripts/stack env)". Fills a fresh topic of 3
partitions with `--events` order events (orders_sample.stream: Kafka transactions of
50,000, so its offsets hold transaction markers), then runs, in one Spark session
(local[*]), each repetition, alternating which of the first two goes first:

- plain read: Spark's Kafka batch source over the whole topic (earliest to latest,
  read_committed), each value parsed with the streaming example's schema, amounts and
  times cast, totals per customer collected: a job that keeps no offsets and checks
  nothing pays this;
- the load: the streaming example's job (spark_jobs/orders_stream_totals.py) in a whole
  load through the core, as a driver that keeps its Spark session runs it: begin (the
  source fixes the range: the last committed end to the last stable offsets), prepare
  (twophase.spark.job.prepare: the range read, every record judged, rejects counted,
  the totals staged to a Postgres table, a Kafka topic and an Iceberg table), vote,
  commit. A fresh consumer group each repetition, so each load reads the whole topic;
- a small load: `--small` new events produced, loaded by the same group (its range is
  only the new events), once in the kept session and once with the prepare in a
  spark-submit of its own, as a DAG's prepare task runs it (the driver's start is the
  submit's wall time less the prepare the job logs).

Events/s are the events produced over the wall time. The load's totals are checked after
each clock stops (every event counted once, none rejected). Prints a Markdown table;
everything the run created (topics, tables, its loads in the transaction log, consumer
groups) is removed at the end. Before the first repetition, a warm-up (`--no-warm-up` skips
it): a plain read and a load of 50,000 events on a topic of their own, not recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "spark_jobs"), str(ROOT / "plugins")]

from orders_sample.stream import produce  # noqa: E402 - after the path above
from orders_sample.stream_totals import ICEBERG_COLUMNS, table_ddl  # noqa: E402
from twophase.connections import Connections  # noqa: E402
from twophase.ids import load_id_for  # noqa: E402
from twophase.log import PostgresLog  # noqa: E402
from twophase.participants.iceberg import IcebergTarget, catalog_of  # noqa: E402
from twophase.participants.kafka import KafkaTarget  # noqa: E402
from twophase.participants.postgres import PostgresTarget  # noqa: E402
from twophase.protocol import coordinator  # noqa: E402
from twophase.sources.kafka import KafkaSource  # noqa: E402
from twophase.spec import LoadSpec  # noqa: E402

from . import iceberg, jars, scratch, session  # noqa: E402

JOB = ROOT / "spark_jobs" / "orders_stream_totals.py"
WARM_UP_EVENTS = 50_000


def plain_read(spark, bootstrap: str, topic: str) -> int:
    """The whole topic read by Spark alone, parsed and totalled per customer; how many
    customers (the rows a load would stage)."""
    from pyspark.sql import functions as F

    import orders_stream_totals

    o = F.from_json(F.col("value").cast("string"), orders_stream_totals.ORDER)
    orders = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest")
              .option("kafka.isolation.level", "read_committed").load()
              .select(o.alias("o"))
              .select("o.customer_id", F.expr("try_cast(o.amount as decimal(12, 2))").alias("amount"),
                      F.expr("try_cast(o.ordered_at as timestamp)").alias("at")))
    return len(orders.groupBy("customer_id").agg(F.count(F.lit(1)), F.sum("amount"), F.min("at"), F.max("at"))
               .collect())


class Pipeline:
    """The bench's copy of the streaming example: its targets under fresh names, reading
    the topic as one consumer group."""

    def __init__(self, conns: Connections, topic: str):
        self.conns, self.name = conns, scratch.new_name()
        self.table = f"{scratch.SCHEMA}.s_{self.name}"
        self.kafka = KafkaTarget(f"{scratch.TOPIC_PREFIX}s-{self.name}", key_column="customer_id")
        self.iceberg = IcebergTarget(f"{iceberg.NAMESPACE}.s_{self.name}", columns=ICEBERG_COLUMNS)
        self.source = KafkaSource(topic, group=f"{scratch.TOPIC_PREFIX}{self.name}")
        self.load_ids: list[str] = []
        scratch.sql(conns.pg_dsn, f"create schema if not exists {scratch.SCHEMA}",
                     table_ddl(self.table))

    def begin(self, log, t: dict) -> str:
        run = f"{self.name}-{len(self.load_ids)}"
        spec = LoadSpec(load_id=load_id_for(scratch.PIPELINE, run), pipeline=scratch.PIPELINE, run_id=run,
                        targets=(PostgresTarget(self.table), self.kafka, self.iceberg), source=self.source)
        self.load_ids.append(spec.load_id)
        started = time.perf_counter()
        coordinator.begin(log, spec, self.conns)
        t["begin"] = time.perf_counter() - started
        return spec.load_id

    def finish(self, log, load_id: str, t: dict) -> None:
        """Vote and commit; per participant commit times as the core measures them."""
        started = time.perf_counter()
        decided = coordinator.vote(log, self.conns, load_id)
        t["vote"] = time.perf_counter() - started
        if decided.state.value != "COMMITTING":
            raise RuntimeError(f"bench load {load_id} was not decided COMMIT: {decided.state.value} {decided.reason}")
        started = time.perf_counter()
        for outcome in coordinator.commit(log, self.conns, load_id):
            t[f"commit.{outcome.participant.split(':')[0]}"] = outcome.seconds  # its kind: postgres, kafka, ...
        t["commit"] = time.perf_counter() - started

    def check(self, log, load_id: str, events: int) -> None:
        metrics = log.get(load_id).metrics
        if metrics.get("orders") != events or metrics.get("rejected_lines"):
            raise RuntimeError(f"bench load {load_id} judged {metrics}; {events} events were produced, none bad")
        [(counted,)] = scratch.sql(self.conns.pg_dsn, f"select coalesce(sum(orders), 0) from {self.table} "
                                    "where load_id = %s", args=(load_id,))
        if counted != events:
            raise RuntimeError(f"bench load {load_id} committed totals of {counted} events, {events} were produced")

    def drop(self, log) -> None:
        for load_id in self.load_ids:
            scratch.settle(log, self.conns, load_id)
            scratch.forget_load(self.conns.pg_dsn, self.conns.kafka_bootstrap, load_id)
        scratch.drop_table(self.conns.pg_dsn, self.table)
        scratch.delete_topics(self.conns.kafka_bootstrap, [self.kafka.topic, self.kafka.staging_topic])
        scratch.delete_groups(self.conns.kafka_bootstrap, [self.source.group])
        iceberg.drop(catalog_of(self.conns.iceberg_catalog), self.iceberg.table)


def load_in_session(spark, log, pipeline: Pipeline) -> tuple[str, dict]:
    """A whole load with the prepare in this session; (load id, seconds per step)."""
    import orders_stream_totals
    from twophase.spark import job

    t: dict[str, float] = {}

    def build(spark, spec):
        started = time.perf_counter()
        try:
            return orders_stream_totals.build(spark, spec)  # its counts read and judge the whole range
        finally:
            t["prepare.job"] = time.perf_counter() - started

    started = time.perf_counter()
    load_id = pipeline.begin(log, t)
    mark = time.perf_counter()
    job.prepare(spark, build, load_id, pipeline.conns)
    t["prepare"] = time.perf_counter() - mark
    t["prepare.staging"] = t["prepare"] - t["prepare.job"]
    pipeline.finish(log, load_id, t)
    t["load"] = time.perf_counter() - started
    return load_id, t


def load_submitted(log, pipeline: Pipeline) -> tuple[str, dict]:
    """A whole load with the prepare in a spark-submit of the job, as a DAG's prepare task
    runs it (a fresh driver); (load id, seconds per step)."""
    t: dict[str, float] = {}
    started = time.perf_counter()
    load_id = pipeline.begin(log, t)
    submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[*]",
              "--conf", "spark.ui.enabled=false", "--conf", f"spark.jars={','.join(jars.ensure())}",
              str(JOB), "--load-id", load_id]
    mark = time.perf_counter()
    proc = subprocess.run(submit, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)])})
    t["prepare"] = time.perf_counter() - mark
    logged = re.search(r"prepare finished in ([0-9.]+) s", proc.stdout)
    if proc.returncode != 0 or not logged:
        raise RuntimeError(f"the prepare's spark-submit failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-3000:]}")
    t["prepare.start"] = t["prepare"] - float(logged.group(1))
    # The job's own log: when it read the load, when build returned (its metrics), the end.
    stamps = [datetime.strptime(re.match(r"(\S+ \S+)", line).group(1), "%Y-%m-%d %H:%M:%S,%f")
              for logged_as in (" twophase.prepare: load ", " twophase.prepare: job metrics: ")
              for line in proc.stdout.splitlines() if logged_as in line][:2]
    if len(stamps) == 2:
        t["prepare.job"] = (stamps[1] - stamps[0]).total_seconds()
        t["prepare.staging"] = float(logged.group(1)) - t["prepare.job"]
    pipeline.finish(log, load_id, t)
    t["load"] = time.perf_counter() - started
    return load_id, t


def warm_up(spark, conns: Connections, log) -> None:
    """A plain read and a load of a small topic of their own, not recorded: the JVM's
    warm-up is then paid by neither contender's first repetition."""
    topic = f"{scratch.TOPIC_PREFIX}events-{scratch.new_name()}"
    pipeline = Pipeline(conns, topic)
    try:
        produce(conns.kafka_bootstrap, topic, rate=50_000, count=WARM_UP_EVENTS, progress=lambda _: None)
        plain_read(spark, conns.kafka_bootstrap, topic)
        load_id, _ = load_in_session(spark, log, pipeline)
        pipeline.check(log, load_id, WARM_UP_EVENTS)
    finally:
        pipeline.drop(log)
        scratch.delete_topics(conns.kafka_bootstrap, [topic])


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


LABELS = {"prepare.start": "  prepare: the driver's start (JVM, Python, session)",
          "prepare.job": "  prepare: the job's read and judging",
          "prepare.staging": "  prepare: rejects kept, staging, votes",
          "load": "**whole load**"}


def _label(step: str) -> str:
    """A step's row label: a part of a phase indented under it (prepare: ..., commit: kafka)."""
    return LABELS.get(step, f"  {step.replace('.', ': ')}" if "." in step else step)


def report(args, plain: list[dict], whole: list[dict], small: list[dict], cold: list[dict]) -> str:
    def s(v):
        return "" if v is None else f"{v:.2f} s"

    def rate(runs: list[dict], key: str) -> float:
        return statistics.median(r["events"] / r[key] for r in runs)

    plain_rate, load_rate = rate(plain, "read"), rate(whole, "load")
    lines = [f"## Kafka source: a whole load beside Spark's plain read ({args.events:,} events on 3 partitions, "
             f"{2 * args.small:,} more each repetition; median of {args.reps})", "",
             "| | seconds | events/s | ÷ plain read's events/s |", "|---|---:|---:|---:|",
             f"| plain read: Spark's Kafka batch source, parsed, totals collected | {s(_median(plain, 'read'))} | "
             f"{plain_rate:,.0f} | 1.00 |",
             f"| the load, begin to commit (Postgres, Kafka, Iceberg) | {s(_median(whole, 'load'))} | "
             f"{load_rate:,.0f} | {load_rate / plain_rate:.2f} |",
             *(f"|   {_label(key).strip()} | {s(_median(whole, key))} | | |"
               for key in ("begin", "prepare.job", "prepare.staging", "vote", "commit")), "",
             "Each repetition, plain read and load: " + "; ".join(
                 f"{p['events']:,} events: {p['read']:.1f} s, {w['load']:.1f} s (the job's read and judging "
                 f"{w['prepare.job']:.1f} s, the rest of prepare {w['prepare.staging']:.1f} s)"
                 for p, w in zip(plain, whole)), "",
             f"## A small load ({args.small:,} new events): where its seconds go (median of {args.reps})", "",
             "| step | Spark session kept | prepare by spark-submit (a DAG's task) |", "|---|---:|---:|"]
    participants = sorted({k for r in small + cold for k in r if k.startswith("commit.")})
    for key in ("begin", "prepare", "prepare.start", "prepare.job", "prepare.staging", "vote", "commit",
                *participants, "load"):
        lines.append(f"| {_label(key)} | {s(_median(small, key))} | {s(_median(cold, key))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.source", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events on the topic (default 1,000,000)")
    parser.add_argument("--small", type=int, default=1000, help="events of the small load (default 1,000)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--no-warm-up", action="store_true",
                        help=f"skip the warm-up (a plain read and a load of {WARM_UP_EVENTS:,} events on a topic of "
                             "their own, not recorded): the first repetition then pays the JVM's warm-up")
    args = parser.parse_args(argv)
    if args.events < 1 or args.small < 1 or args.reps < 1:
        parser.error("--events, --small and --reps must be at least 1")
    conns = Connections.from_env()
    log = PostgresLog(conns.pg_dsn)
    log.ensure_schema()
    spark = session.start(args.driver_memory)
    topic = f"{scratch.TOPIC_PREFIX}events-{scratch.new_name()}"
    pipelines: list[Pipeline] = []
    plain, whole, small, cold = [], [], [], []

    def add(count: int) -> None:
        produce(conns.kafka_bootstrap, topic, rate=50_000, count=count, progress=lambda _: None)

    try:
        if not args.no_warm_up:
            warm_up(spark, conns, log)
        print(f"bench.source: producing {args.events:,} events to {topic}", flush=True)
        add(args.events)
        on_topic = args.events
        for rep in range(args.reps):
            pipeline = Pipeline(conns, topic)  # a fresh group: its first load reads the whole topic
            pipelines.append(pipeline)
            for contender in (("plain", "load") if rep % 2 == 0 else ("load", "plain")):
                if contender == "plain":
                    started = time.perf_counter()
                    plain_read(spark, conns.kafka_bootstrap, topic)
                    plain.append({"events": on_topic, "read": time.perf_counter() - started})
                else:
                    load_id, t = load_in_session(spark, log, pipeline)
                    pipeline.check(log, load_id, on_topic)
                    whole.append({**t, "events": on_topic})
            for runs, load in ((small, lambda: load_in_session(spark, log, pipeline)),
                               (cold, lambda: load_submitted(log, pipeline))):
                add(args.small)
                on_topic += args.small
                load_id, t = load()
                pipeline.check(log, load_id, args.small)
                runs.append(t)
            print(f"bench.source: repetition {rep + 1} of {args.reps} done", flush=True)
        print(report(args, plain, whole, small, cold))
    finally:
        for pipeline in pipelines:
            pipeline.drop(log)
        scratch.delete_topics(conns.kafka_bootstrap, [topic])
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
