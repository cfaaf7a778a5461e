"""Loads a Kafka source's new events again and again, in its own process, until it is
killed (test_source_loads.py kills it at random instants).

usage: source_driver.py EVENTS_JSON RUN_PREFIX CAP
EVENTS_JSON: the `events` fixture of test_source_loads.py. Runs RUN_PREFIX-0, RUN_PREFIX-1,
... of the events pipeline, each at most CAP offsets; prints `ready` once its Spark session
runs, and `load <run> <state>` after each load. Its own connections (not its Spark
workers') carry the application name `source-driver RUN_PREFIX`, so the test can tell when
the last of them has ended after the kill.
"""

import json
import os
import sys
import time

from pyspark.sql import SparkSession

from source_events import load_new_events
from spark_session import java_options
from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.protocol.coordinator import NothingToRead
from twophase.sources.kafka import KafkaSource

events, prefix, cap = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
spark = java_options(SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                     .config("spark.sql.shuffle.partitions", "2")).getOrCreate()
os.environ["PGAPPNAME"] = f"source-driver {prefix}"  # after Spark started: its workers do not inherit it
conns = Connections.from_env()
log, source = PostgresLog(conns.pg_dsn), KafkaSource(events["source"], group=events["pipeline"], cap=cap)
print("ready", flush=True)
n = 0
while True:
    try:
        state = load_new_events(log, conns, spark, events, f"{prefix}-{n}", source)
    except NothingToRead:
        time.sleep(0.2)
        continue
    print(f"load {prefix}-{n} {state}", flush=True)
    n += 1
