"""orders_hourly_totals: the orders of one hour -> totals per customer, atomically in a
Postgres table (analytics.customer_hourly_totals) and a Kafka topic (customer-hourly-totals).

Schedule: hourly, each run loading the hour that just ended (its data interval: the run
at 06:00 UTC loads 05:00-06:00). ORDERS_HOURLY_SCHEDULE overrides the cron expression.
Created paused: unpause it once orders land for the current day.

Input: the daily example's JSON lines, $ORDERS_DATA/landing/date=YYYY-MM-DD/ (ORDERS_DATA:
a storage URI, as for the daily example; make a sample day with `python -m orders_sample`),
listed at begin as the daily example lists it (an IntervalFolder of the hour's day); the
job keeps the orders whose ordered_at falls in the hour. A run whose day folder has not
landed yet waits for it, deferred to the triggerer (no worker held), up to
ORDERS_HOURLY_INPUT_WAIT_S seconds (default two hours), then fails naming the folder.

Mode append loads each hour once (a committed hour is "nothing to do"); mode replace swaps
that hour's rows (and marks the topic's records as replacing).

Load a given hour: its run's data interval is the hour, so give the logical date of the
hour's END (a manual run's interval is the last whole hour before its logical date):

    airflow dags test orders_hourly_totals 2026-11-20T06:00:00+00:00            # 05:00-06:00
    airflow dags test orders_hourly_totals 2026-11-20T06:00:00+00:00 -c '{"mode": "replace"}'

or trigger it from the UI or the REST API with that logical date. There is no `date`
param (a whole day is not an hour): a run without a data interval is refused.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG, CronDataIntervalTimetable

from orders_sample.locations import day_folder, rejects_folder
from twophase.env_seconds import seconds
from twophase.spec import SpecError
from twophase_airflow import IntervalFolder, LoadConfig, Table, Topic, WaitForInput, load_params, two_phase_load

ROOT = Path(__file__).resolve().parents[1]
INPUT_WAIT = timedelta(seconds=seconds("ORDERS_HOURLY_INPUT_WAIT_S", 2 * 3600, zero_allowed=True))

# The job's output, declared once: the table is made from it (with load_id and the key),
# the topic's values hold its columns, and the job's frame must match it.
SCHEMA = {"customer_id": "string", "hour": "timestamp", "orders": "int", "revenue": "decimal(22,2)"}


def describe_input(interval, params, load_id) -> dict:
    """The hour, and where its rejected lines go. Refuses an interval longer than an hour or
    across midnight: its rows would not be an hour's (the table holds one row per customer
    and hour), and the job reads one day's folder."""
    start, end = interval.start, interval.end
    if end - start > timedelta(hours=1) or (end - timedelta(microseconds=1)).date() != start.date():
        raise SpecError(f"orders_hourly_totals loads one hour of one day, not {start.isoformat()} .. "
                        f"{end.isoformat()}; run it with the logical date of the hour's end, e.g. "
                        "`airflow dags test orders_hourly_totals 2026-11-20T06:00:00+00:00` loads 05:00-06:00")
    day = interval.day.isoformat()
    return {"start": start.isoformat(), "end": end.isoformat(),
            "rejects": rejects_folder(day, load_id)}


with DAG(
    dag_id="orders_hourly_totals",
    description="Hourly order totals per customer, loaded atomically into a table and a topic",
    schedule=CronDataIntervalTimetable(os.environ.get("ORDERS_HOURLY_SCHEDULE", "0 * * * *"), timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=True,
    # The run's data interval is the hour: the daily `date` param has no meaning here.
    params=load_params(min_rows=1, max_rejected_share=0.05, pick_day=False),
    tags=["twophase", "example"],
    doc_md=__doc__,
):
    two_phase_load(
        LoadConfig(targets=[
            Table("analytics.customer_hourly_totals", interval_column="hour", key=("hour", "customer_id")),
            Topic("customer-hourly-totals", key_column="customer_id"),
        ], schema=SCHEMA, source=IntervalFolder(day_folder, wait=WaitForInput(up_to=INPUT_WAIT)),
            describe_input=describe_input),
        application=str(ROOT / "spark_jobs" / "orders_hourly_totals.py"),
    )
