"""twophase_stack_check: proves the stack Airflow runs on: Spark, Postgres and Kafka.

Run it after setting up a new deployment: `airflow dags test twophase_stack_check`.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import dag, task

SPARK_JOBS = Path(__file__).resolve().parents[1] / "spark_jobs"


@dag(dag_id="twophase_stack_check", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, tags=["twophase"])
def stack_check():
    spark = SparkSubmitOperator(
        task_id="spark", conn_id="spark_default", application=str(SPARK_JOBS / "stack_check.py"),
        application_args=["1000000"], name="twophase-stack-check",
    )

    @task
    def postgres():
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        setting = PostgresHook(postgres_conn_id="twophase_postgres").get_first("show max_prepared_transactions")[0]
        if int(setting) == 0:
            raise RuntimeError("max_prepared_transactions is 0 on the twophase_postgres server: "
                               "two-phase commit needs it above the number of loads in flight")
        print(f"postgres: answers, max_prepared_transactions={setting}")

    @task
    def kafka():
        from airflow.sdk import BaseHook
        from confluent_kafka.admin import AdminClient

        servers = BaseHook.get_connection("twophase_kafka").extra_dejson["bootstrap.servers"]
        brokers = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=15).brokers
        print(f"kafka: answers at {servers}, {len(brokers)} broker(s)")

    spark >> postgres() >> kafka()


stack_check()
