"""The tests' Spark session, as a pytest fixture, and a stop that leaves nothing for exit.

Why the stop does more than `session.stop()`: pyspark keeps its Py4J gateway (and the
JVM behind it) for the life of the interpreter, and Py4J closes the gateway's connections
in `__del__` when the interpreter exits, logging "Closing down clientserver connection" at
INFO. By then pytest has closed the stream it captured stdout into, and Airflow (imported
by other tests) has put a root log handler on exactly that stream, so the exit printed a
`--- Logging error --- ValueError: I/O operation on closed file` traceback after the
summary. Shutting the gateway down while the session's streams are still open, and
waiting for the JVM to end, leaves nothing to close at exit.
"""

from __future__ import annotations

import gc
import os

import pytest

from support import localstack


def stop_spark(session) -> None:
    """Stop the session, shut its Py4J gateway down and wait for the JVM to exit."""
    from pyspark import SparkContext

    if SparkContext._gateway is None:  # stopped already: nothing is left to stop
        return
    session.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    jvm = getattr(gateway, "proc", None)  # the spark-submit process pyspark started
    if jvm is not None:
        jvm.stdin.close()  # the JVM exits when its stdin from Python closes
        jvm.wait(timeout=60)
    # A later session starts a new gateway; the old connections are collected now, not at exit.
    SparkContext._gateway = SparkContext._jvm = None
    del gateway
    gc.collect()


def java_options(builder):
    """The builder with the driver's and executors' JVM options of the stack's Spark
    connection (TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS, when set: scripts/test sets them, a
    short-lived JVM's start on less CPU), and the stack's jars (TWOPHASE_SPARK_JARS: Spark's
    Kafka connector, for a Kafka source)."""
    jars = os.environ.get("TWOPHASE_SPARK_JARS")
    builder = builder.config("spark.jars", jars) if jars else builder
    for key, value in localstack("airflow").spark_java().items():
        builder = builder.config(key, value)
    return builder


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    # local[2, 4]: two cores, and a failed task is retried (up to 4 attempts), as on a cluster.
    session = (java_options(SparkSession.builder.master("local[2, 4]").appName("twophase-tests"))
               .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
               .getOrCreate())
    yield session
    stop_spark(session)
