"""The one Spark session every Spark contender runs in: local[*], the peers' jars."""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager

from . import jars
from .data import ROOT


# The driver JVM's collector. G1 grows the heap towards spark.driver.memory the longer
# allocation goes on, whatever is live: Spark's own scan of the same input grew its RSS
# 1.28-1.63x from 1M to 20M rows. The serial collector sizes the heap from what is live
# after a full collection, so the JVM's RSS follows what the load holds (bench/findings.md).
# Every Spark contender runs in this one JVM: peers and atomic load alike.
JAVA_OPTIONS = "-XX:+UseSerialGC"


def start(driver_memory: str, java_options: str = JAVA_OPTIONS):
    from pyspark.sql import SparkSession

    # Python workers unpickle bench.staging's functions: they need the checkout on their path.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*paths, str(ROOT)]))
    spark = (SparkSession.builder.master("local[*]").appName("twophase-bench")
            .config("spark.jars", ",".join(jars.ensure()))
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.extraJavaOptions", java_options)
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    # Spark caches its Kafka producers: they keep asking for the topics each repetition deleted.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.kafka", jvm.org.apache.logging.log4j.Level.ERROR)
    return spark


def load_options(prog: str, doc: str, argv: list[str] | None) -> argparse.Namespace:
    """The options of a bench of atomic loads on the stack (bench.last_resource,
    bench.attach): --rows, --reps, --shape, --partitions, --driver-memory."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--shape", default="narrow", choices=("narrow", "wide"))
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--driver-memory", default="4g")
    return parser.parse_args(argv)


@contextmanager
def on_stack(args: argparse.Namespace):
    """(connections, transaction log, the Dataset of load_options' `args`) of a bench of
    atomic loads, on the stack of the environment, after sweeping what an interrupted run
    left; the dataset is dropped after a clean run, and the Spark session stopped."""
    from twophase.connections import Connections
    from twophase.log import PostgresLog

    from . import scratch
    from .data import Dataset

    conns = Connections.from_env()
    log = PostgresLog(conns.pg_dsn)
    log.ensure_schema()
    spark = start(args.driver_memory)
    scratch.sweep(conns.pg_dsn, conns.kafka_bootstrap)
    try:
        data = Dataset.load(spark, args.shape, args.rows, args.partitions)
        yield conns, log, data
        data.drop()
    finally:
        spark.stop()
