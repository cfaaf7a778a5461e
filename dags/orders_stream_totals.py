"""orders_stream_totals: order events of a Kafka topic -> totals per customer, every few
minutes, each load reading exactly the events after the last committed load, atomically
in a Postgres table (analytics.customer_stream_totals), a Kafka topic
(customer-stream-totals) and an Apache Iceberg table (analytics.customer_stream_totals).

Source: the topic orders-events (produce events with `python -m orders_sample.stream
--rate 50`). Each load's offsets are fixed at begin, from where the last committed load
ended to the partitions' last stable offsets (at most 100,000 offsets a load, so a backlog
drains over several loads); a rolled back load's events are read again by the next. A run
that finds nothing new ends green without a load. Schedule: every 5 minutes
(ORDERS_STREAM_SCHEDULE overrides it).

The tables hold one row per customer and load: a customer's total is the sum of its rows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, CronTriggerTimetable

from orders_sample.stream_totals import ICEBERG_COLUMNS, table_ddl
from twophase.audit import DuplicateKeys, ValueRange
from twophase_airflow import IcebergTable, KafkaTopicSource, LoadConfig, Table, Topic, load_params, two_phase_load

ROOT = Path(__file__).resolve().parents[1]

TABLE_DDL = "create schema if not exists analytics;\n" + table_ddl("analytics.customer_stream_totals")

with DAG(
    dag_id="orders_stream_totals",
    description="Order events of a Kafka topic, totalled per customer every few minutes, exactly once, into a "
                "table, a topic and an Iceberg table",
    schedule=CronTriggerTimetable(os.environ.get("ORDERS_STREAM_SCHEDULE", "*/5 * * * *"), timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=load_params(min_rows=1, max_rejected_share=0.05),
    tags=["twophase", "example"],
    doc_md=__doc__,
):
    two_phase_load(
        LoadConfig(targets=[
            Table("analytics.customer_stream_totals", interval_column="", ddl=TABLE_DDL),
            Topic("customer-stream-totals", key_column="customer_id"),
            IcebergTable("analytics.customer_stream_totals", interval_column="", columns=ICEBERG_COLUMNS),
        ], source=KafkaTopicSource("orders-events", cap=100_000),
            rules=[DuplicateKeys("analytics.customer_stream_totals", ("customer_id",), error=(0, 0)),
                   ValueRange("analytics.customer_stream_totals", "revenue", low=0, error=(0, 0))]),
        application=str(ROOT / "spark_jobs" / "orders_stream_totals.py"),
    )
