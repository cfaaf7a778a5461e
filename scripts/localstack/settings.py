"""Settings of the local stack, in one place.

Ports default away from the usual ones (5432, 9092) so a user's own Postgres or Kafka is
never touched; override them with the environment variables named below.

The server settings that matter to the protocol (max_prepared_transactions, Kafka's
single-broker transaction settings) live here once: the stack applies them, and
tests/test_docker_compose.py checks that docker-compose.yml uses the same values.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Postgres: a prepared transaction per load (not per Spark partition: executors COPY into
# an unlogged staging table and only the driver prepares), but recovery tests and parallel
# loads keep several in flight at once, so keep plenty of room.
POSTGRES_SERVER_SETTINGS = {
    "max_prepared_transactions": "64",
    "max_connections": "200",
}

# The stock server: a second Postgres configured as PostgreSQL ships, so it cannot prepare
# transactions, for the pipeline's targets on such servers. It holds only the tests' and
# the example's small tables: little memory, few connections.
POSTGRES_STOCK_SERVER_SETTINGS = {
    "max_prepared_transactions": "0",  # PostgreSQL's default
    "shared_buffers": "32MB",
    "max_connections": "60",
}

# Kafka, one KRaft node acting as broker and controller.
KAFKA_BROKER_SETTINGS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.replication.factor": "1",
    # A batch load's commit copies a whole load inside one transaction: allow an hour.
    "transaction.max.timeout.ms": "3600000",
    # The pipeline creates the topics it needs, with explicit settings.
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
}

# Airflow connection ids, the same in the local stack and in docker-compose.yml.
CONN_POSTGRES = "twophase_postgres"
CONN_KAFKA = "twophase_kafka"
CONN_SPARK = "spark_default"

PIPELINE_DB = "twophase"
# A second database of the pipeline role: targets in two databases of one load (its
# Airflow connection is twophase_reporting).
REPORTING_DB = "twophase_reporting"
CONN_REPORTING = "twophase_reporting"
# The stock server's two databases of the pipeline role (a load can have targets in both);
# their Airflow connections have the same names.
STOCK_DB = "twophase_stock"
CONN_STOCK = "twophase_stock"
STOCK_REPORTS_DB = "twophase_stock_reports"
CONN_STOCK_REPORTS = "twophase_stock_reports"
# The benchmark's comparison with an earlier release (bench/compare) gives that release
# this database for its transaction log: an older release cannot read a log that a newer
# one has migrated.
BASELINE_DB = "twophase_baseline"
# The Iceberg catalog of the stack: pyiceberg's SQL catalog in this database, its tables'
# files in <stack>/iceberg/warehouse (Airflow connection twophase_iceberg).
ICEBERG_DB = "twophase_iceberg"
CONN_ICEBERG = "twophase_iceberg"
ICEBERG_CATALOG_NAME = "twophase"
PIPELINE_ROLE = "twophase"
AIRFLOW_DB = "airflow"


def airflow_db() -> str:
    """Airflow's metadata database: AIRFLOW_DB, or the one TWOPHASE_AIRFLOW_DB names. The
    tests' running Airflow has one of its own (tests/ui/conftest.py): its scheduler then
    never sees, and never runs tasks of, the runs `airflow dags test` makes meanwhile."""
    name = os.environ.get("TWOPHASE_AIRFLOW_DB") or AIRFLOW_DB
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
        from .proc import StackError

        raise StackError(f"TWOPHASE_AIRFLOW_DB={name!r}: a database name of lower-case letters, digits and '_'")
    return name


@dataclass(frozen=True)
class Ports:
    postgres: int
    postgres_stock: int
    kafka: int
    kafka_controller: int
    airflow: int

    @classmethod
    def from_env(cls) -> "Ports":
        return cls(
            postgres=int(os.environ.get("TWOPHASE_PG_PORT", "15432")),
            postgres_stock=int(os.environ.get("TWOPHASE_STOCK_PG_PORT", "15433")),
            kafka=int(os.environ.get("TWOPHASE_KAFKA_PORT", "19092")),
            kafka_controller=int(os.environ.get("TWOPHASE_KAFKA_CONTROLLER_PORT", "19093")),
            airflow=int(os.environ.get("TWOPHASE_AIRFLOW_PORT", "18080")),
        )


def stack_dir() -> Path:
    """Where all state, data and logs of the stack live (git-ignored)."""
    return Path(os.environ.get("TWOPHASE_STACK_DIR", ROOT / ".stack")).resolve()


def machine_cache() -> Path:
    """What the stack makes once per machine, not per checkout (made again when missing):
    the tests' Spark home (spark_home.py). TWOPHASE_CACHE_DIR, else ~/.cache/twophase."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "twophase"
    return Path(os.environ.get("TWOPHASE_CACHE_DIR") or default).resolve()


def venv_bin() -> Path:
    return ROOT / ".venv" / "bin"


# The stack as a cluster (scripts/stack cluster ...): a Spark standalone master with one
# worker that cannot see the checkout, and three Kafka brokers replicating every partition.
# Its folder is outside the checkout: the worker's virtualenv, working folder and logs, the
# brokers' data. One cluster per machine, like the ports.
def cluster_dir() -> Path:
    return Path(os.environ.get("TWOPHASE_CLUSTER_DIR", "/var/tmp/twophase-cluster")).resolve()


SPARK_WORKER_CORES = 2
SPARK_WORKER_MEMORY = "3g"
# The master's and the worker's own JVMs (not the executors).
SPARK_DAEMON_MEMORY = "384m"

# Each broker is also a controller (KRaft, three voters): one may be down at a time.
KAFKA_CLUSTER_BROKER_SETTINGS = {
    # Idle, three nodes kept each other busy (11% of a core with C1 alone): followers polled
    # the leaders every 500 ms and the controller appended a no-op record as often. A
    # follower's fetch still returns as soon as data arrives; only idle polling is slower.
    "replica.fetch.wait.max.ms": "5000",
    "metadata.max.idle.interval.ms": "5000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.max.timeout.ms": "3600000",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
}
KAFKA_CLUSTER_NODES = (1, 2, 3)

CONN_SPARK_CLUSTER = "spark_cluster"
CONN_KAFKA_CLUSTER = "twophase_kafka_cluster"


@dataclass(frozen=True)
class ClusterPorts:
    spark_master: int
    spark_master_ui: int
    spark_worker_ui: int
    # Broker and controller port of each node, in KAFKA_CLUSTER_NODES order.
    kafka: tuple[int, ...]
    kafka_controllers: tuple[int, ...]

    @classmethod
    def from_env(cls) -> "ClusterPorts":
        def port(name: str, default: int) -> int:
            return int(os.environ.get(name, str(default)))

        master = port("TWOPHASE_SPARK_MASTER_PORT", 17077)
        kafka = port("TWOPHASE_KAFKA_CLUSTER_PORT", 19192)
        controller = port("TWOPHASE_KAFKA_CLUSTER_CONTROLLER_PORT", 19195)
        nodes = range(len(KAFKA_CLUSTER_NODES))
        return cls(
            spark_master=master,
            spark_master_ui=port("TWOPHASE_SPARK_MASTER_UI_PORT", 17080),
            spark_worker_ui=port("TWOPHASE_SPARK_WORKER_UI_PORT", 17081),
            kafka=tuple(kafka + i for i in nodes),
            kafka_controllers=tuple(controller + i for i in nodes),
        )
