"""orders_daily_totals: a day of order events -> totals per customer and a summary of the
day, atomically in two Postgres tables, a Kafka topic (customer-daily-totals) and an Apache
Iceberg table (analytics.customer_daily_totals of the catalog `twophase_iceberg`,
partitioned by day; the first load creates it). The tables are on two servers:
analytics.customer_daily_totals in the pipeline's database, which prepares its
transaction; analytics.orders_daily_summary in the stock server's database
(`twophase_stock`: max_prepared_transactions = 0, as PostgreSQL ships), which commits as
the load's last resource, its commit the load's decision (docs/protocol.md).

Schedule: daily at midnight UTC, each run loading the day that just ended (its data
interval). ORDERS_SCHEDULE overrides the cron expression, e.g. "*/2 * * * *" in a test.

Input: JSON lines in $ORDERS_DATA/landing/date=YYYY-MM-DD/ (make sample days with
`python -m orders_sample`), the run's day folder: its files are listed at begin, and one
that changes or vanishes before the load read it fails the load (an IntervalFolder
source). Rejected lines go to $ORDERS_DATA/rejects/. ORDERS_DATA is a storage URI
(file://, hdfs://namenode/..., s3a://bucket/...; a plain absolute path is a local one) and
defaults to .stack/data/orders in this checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable

from orders_sample.locations import day_folder, rejects_folder
from twophase.audit import DuplicateKeys, NullShare, RowCountChange, ValueRange
from twophase_airflow import IcebergTable, IntervalFolder, LoadConfig, Table, Topic, load_params, two_phase_load

ROOT = Path(__file__).resolve().parents[1]

SUMMARY_DDL = """
create schema if not exists analytics;
create table if not exists analytics.orders_daily_summary (
    day date primary key,
    orders int not null,
    revenue numeric(16, 2) not null,
    customers int not null,
    rejected_lines int not null,
    load_id text not null
);
"""

TABLE_DDL = """
create schema if not exists analytics;
create table if not exists analytics.customer_daily_totals (
    customer_id text not null,
    day date not null,
    orders int not null,
    revenue numeric(14, 2) not null,
    first_order_at timestamptz not null,
    last_order_at timestamptz not null,
    load_id text not null,
    primary key (day, customer_id)
);
"""


# The Iceberg table's columns (Iceberg types), as the job's per-customer frame has them.
ICEBERG_COLUMNS = {"customer_id": "string", "day": "date", "orders": "int", "revenue": "decimal(14, 2)",
                   "first_order_at": "timestamptz", "last_order_at": "timestamptz"}


# The audit, on the staged data before the vote (docs/audit.md): an error aborts the load.
AUDIT_RULES = [
    DuplicateKeys("analytics.customer_daily_totals", ("day", "customer_id"), error=(0, 0)),
    ValueRange("analytics.customer_daily_totals", "revenue", low=0, error=(0, 0)),
    NullShare("customer-daily-totals", "customer_id", error=(0, 0)),
    # A day with half the customers of the last loaded one, or twice as many: a warning to look.
    RowCountChange("analytics.customer_daily_totals", warn=(-0.5, 1.0)),
]


def describe_input(interval, params, load_id) -> dict:
    """The day, and where its rejected lines go (a URI under ORDERS_DATA)."""
    day = interval.day.isoformat()
    return {"date": day, "rejects": rejects_folder(day, load_id)}


with DAG(
    dag_id="orders_daily_totals",
    description="Daily order totals per customer and per day, loaded atomically into two tables, a topic and an "
                "Iceberg table",
    # Data intervals, not trigger times: the run at midnight covers the day before.
    schedule=CronDataIntervalTimetable(os.environ.get("ORDERS_SCHEDULE", "0 0 * * *"), timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params=load_params(min_rows=1, max_rejected_share=0.05),
    tags=["twophase", "example"],
    doc_md=__doc__,
):
    two_phase_load(
        LoadConfig(targets=[
            Table("analytics.customer_daily_totals", interval_column="day", ddl=TABLE_DDL),
            Table("analytics.orders_daily_summary", interval_column="day", frame="summary", ddl=SUMMARY_DDL,
                  conn_id="twophase_stock"),
            Topic("customer-daily-totals", key_column="customer_id"),
            IcebergTable("analytics.customer_daily_totals", interval_column="day", columns=ICEBERG_COLUMNS,
                         partition_by=("day",)),
        ], source=IntervalFolder(day_folder), describe_input=describe_input, rules=AUDIT_RULES),
        application=str(ROOT / "spark_jobs" / "orders_daily_totals.py"),
    )
