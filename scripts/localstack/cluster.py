"""scripts/stack cluster up|down|status|env|reset: the stack playing a cluster.

A Spark standalone master with one worker that cannot see the checkout (spark_cluster.py,
its Python from executor_python.py) and three Kafka brokers (kafka_cluster.py). It runs
beside the single-node stack, on its own ports; `environment()` is what a shell or a test
needs to use it, including the Airflow connections of both.
"""

from __future__ import annotations

import json

from . import executor_python, kafka_cluster, spark_cluster
from .airflow import spark_java
from .settings import CONN_KAFKA_CLUSTER, CONN_SPARK_CLUSTER, ClusterPorts

USAGE = """usage: scripts/stack cluster up|down|status|env|reset
  up      build the executors' virtualenv, start the Spark master and worker and three Kafka
          brokers; idempotent (restarts what is down), waits until each answers
  down    stop them
  status  say what is up and where
  env     print export lines: eval "$(scripts/stack cluster env)"
  reset   stop them and delete their data (keeps the executors' virtualenv)"""


def up() -> None:
    spark_cluster.check_cluster_dir()
    kafka_cluster.up()
    spark_cluster.up()


def down() -> None:
    spark_cluster.down()
    kafka_cluster.down()


def reset() -> None:
    spark_cluster.destroy()
    kafka_cluster.destroy()


def is_up() -> bool:
    return all(s.startswith("up") for s in (spark_cluster.status(), kafka_cluster.status()))


def is_running() -> bool:
    """True when any of the cluster's processes runs (then `env` includes the cluster's)."""
    return (spark_cluster.running_master() is not None
            or any(pid is not None for pid in kafka_cluster.pids().values()))


def status_text() -> str:
    return "\n".join([
        f"spark cluster  {spark_cluster.status()}",
        f"kafka cluster  {kafka_cluster.status()}",
    ])


def environment() -> dict[str, str]:
    ports = ClusterPorts.from_env()
    python = str(executor_python.python())
    bootstrap = kafka_cluster.bootstrap()
    return {
        "TWOPHASE_CLUSTER_SPARK_MASTER": spark_cluster.master_url(),
        "TWOPHASE_CLUSTER_EXECUTOR_PYTHON": python,
        "TWOPHASE_CLUSTER_KAFKA_BOOTSTRAP": bootstrap,
        f"AIRFLOW_CONN_{CONN_SPARK_CLUSTER.upper()}": json.dumps({
            "conn_type": "spark", "host": "spark://127.0.0.1", "port": ports.spark_master,
            "extra": {"deploy-mode": "client", "spark.pyspark.python": python, **spark_java()},
        }),
        f"AIRFLOW_CONN_{CONN_KAFKA_CLUSTER.upper()}": json.dumps({
            "conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap},
        }),
    }
