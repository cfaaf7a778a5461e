"""customer_totals_downstream: an example consumer, scheduled on committed loads only.

orders_daily_totals emits its table and topic Assets in the commit task, never in a
rollback; this DAG runs when both were updated, and reads the load id from the events.
"""

from __future__ import annotations

import logging

import pendulum
from airflow.sdk import dag, task

from twophase_airflow import table_asset, topic_asset

TABLE = table_asset("analytics.customer_daily_totals")
TOPIC = topic_asset("customer-daily-totals")


@dag(dag_id="customer_totals_downstream", schedule=(TABLE & TOPIC), catchup=False,
     start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), tags=["twophase", "example"], doc_md=__doc__)
def customer_totals_downstream():
    @task
    def report(triggering_asset_events=None) -> list[str]:
        load_ids = sorted({event.extra.get("load_id") for events in (triggering_asset_events or {}).values()
                           for event in events})
        for load_id in load_ids:
            logging.getLogger("twophase").info("committed load %s is ready downstream", load_id)
        return load_ids

    report()


customer_totals_downstream()
