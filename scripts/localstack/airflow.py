"""Airflow's home for the local stack: its settings, connections and metadata database.

The metadata database is `airflow` in the stack's Postgres (not the pipeline's database),
or the one TWOPHASE_AIRFLOW_DB names (settings.airflow_db).
Connections come from the environment (AIRFLOW_CONN_*), never from the metadata DB.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from contextlib import closing

import psycopg2

from . import postgres, secrets, spark_home, spark_jars
from .proc import StackError
from .settings import (AIRFLOW_DB, CONN_ICEBERG, CONN_KAFKA, CONN_POSTGRES, CONN_REPORTING, CONN_SPARK, CONN_STOCK,
                       CONN_STOCK_REPORTS, ICEBERG_CATALOG_NAME, ICEBERG_DB, PIPELINE_DB, PIPELINE_ROLE, REPORTING_DB,
                       ROOT, STOCK_DB, STOCK_REPORTS_DB, Ports, airflow_db, stack_dir, venv_bin)


# A metadata database as the first `airflow db migrate` of this Airflow left it (up()).
MIGRATED = "airflow_migrated"


def home():
    return stack_dir() / "airflow"


def iceberg_catalog(port: int) -> str:
    """The stack's Iceberg catalog as pyiceberg properties (JSON; holds the password)."""
    password = secrets.load()["pipeline_password"]
    return json.dumps({
        "name": ICEBERG_CATALOG_NAME, "type": "sql",
        "uri": f"postgresql+psycopg2://{PIPELINE_ROLE}:{password}@127.0.0.1:{port}/{ICEBERG_DB}",
        "warehouse": (stack_dir() / "iceberg" / "warehouse").as_uri(),
    })


def _postgres_connection(port: int, db: str) -> str:
    """An Airflow connection (JSON) of type postgres: the pipeline's role in `db` on the
    stack's server at 127.0.0.1:port."""
    password = secrets.load()["pipeline_password"]
    return json.dumps({
        "conn_type": "postgres", "host": "127.0.0.1", "port": port,
        "login": PIPELINE_ROLE, "password": password, "schema": db,
    })


def environment() -> dict[str, str]:
    """Everything a shell (or a test, or Airflow itself) needs to use the stack."""
    ports = Ports.from_env()
    password = secrets.load()["pipeline_password"]
    kafka_bootstrap = f"127.0.0.1:{ports.kafka}"
    venv_python = str(venv_bin() / "python")
    spark_jars_list = ",".join(spark_jars.ensure())
    return {
        "TWOPHASE_PG_DSN": postgres.dsn(ports.postgres, PIPELINE_DB),
        "TWOPHASE_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "AIRFLOW_HOME": str(home()),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # A DAG runs on its schedule only once a person unpauses it (the README says how).
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
            f"postgresql+psycopg2://{PIPELINE_ROLE}:{password}@127.0.0.1:{ports.postgres}/{airflow_db()}"
        ),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.load()["airflow_jwt_secret"],
        f"AIRFLOW_CONN_{CONN_POSTGRES.upper()}": _postgres_connection(ports.postgres, PIPELINE_DB),
        f"AIRFLOW_CONN_{CONN_REPORTING.upper()}": _postgres_connection(ports.postgres, REPORTING_DB),
        "TWOPHASE_REPORTING_DSN": postgres.dsn(ports.postgres, REPORTING_DB),
        # The stock server's two databases (max_prepared_transactions = 0: it cannot prepare).
        f"AIRFLOW_CONN_{CONN_STOCK.upper()}": _postgres_connection(ports.postgres_stock, STOCK_DB),
        f"AIRFLOW_CONN_{CONN_STOCK_REPORTS.upper()}": _postgres_connection(ports.postgres_stock, STOCK_REPORTS_DB),
        "TWOPHASE_STOCK_DSN": postgres.dsn(ports.postgres_stock, STOCK_DB),
        "TWOPHASE_STOCK_REPORTS_DSN": postgres.dsn(ports.postgres_stock, STOCK_REPORTS_DB),
        # The same databases by their connection names, for the core's commands outside
        # Airflow (python -m twophase verify, recover, show: Connections.from_env).
        "TWOPHASE_CONNECTIONS": json.dumps({
            CONN_REPORTING: ["postgres", postgres.dsn(ports.postgres, REPORTING_DB)],
            CONN_STOCK: ["postgres", postgres.dsn(ports.postgres_stock, STOCK_DB)],
            CONN_STOCK_REPORTS: ["postgres", postgres.dsn(ports.postgres_stock, STOCK_REPORTS_DB)],
        }),
        "TWOPHASE_ICEBERG_CATALOG": iceberg_catalog(ports.postgres),
        f"AIRFLOW_CONN_{CONN_ICEBERG.upper()}": json.dumps({
            "conn_type": "iceberg", "extra": json.loads(iceberg_catalog(ports.postgres)),
        }),
        f"AIRFLOW_CONN_{CONN_KAFKA.upper()}": json.dumps({
            "conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap},
        }),
        # The prepare operator takes the executors' Python from the Spark connection's extra
        # (here: local mode, this host's venv), never from PYSPARK_PYTHON below. Its master:
        # local[*], or TWOPHASE_SPARK_MASTER (scripts/test: local[1], see there).
        f"AIRFLOW_CONN_{CONN_SPARK.upper()}": json.dumps({
            "conn_type": "spark", "host": os.environ.get("TWOPHASE_SPARK_MASTER") or "local[*]",
            "extra": {"spark.pyspark.python": venv_python, **spark_java(), "spark.jars": spark_jars_list},
        }),
        # Spark's Kafka connector for sessions started in a process (tests, scripts).
        "TWOPHASE_SPARK_JARS": spark_jars_list,
        # The Kafka client's jars: the commit copy of a large load runs in a JVM (kafka/jvm_copy.py).
        "TWOPHASE_KAFKA_COPY_CLASSPATH": spark_jars.kafka_client_classpath(spark_jars_list.split(",")),
        # For Spark sessions started in-process and spark-submits run by hand (tests, scripts):
        # their Python workers must use the project's interpreter (pyarrow, psycopg2, ...).
        "PYSPARK_PYTHON": venv_python,
        "PYSPARK_DRIVER_PYTHON": venv_python,
        "PYTHONPATH": str(ROOT / "plugins"),
        "VIRTUAL_ENV": str(ROOT / ".venv"),
    }


def spark_java() -> dict[str, str]:
    """The JVM options of a Spark connection's driver and executors, when
    TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS sets them (scripts/test does: options that make a
    short-lived JVM start on less CPU). An executor gets them but the driver's class archive,
    which holds the classes of this stack's Spark home, not a worker's."""
    options = os.environ.get("TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS")
    if not options:
        return {}
    return {"spark.driver.extraJavaOptions": options,
            "spark.executor.extraJavaOptions": spark_home.driver_options_without_archive()}


def _stamp(version: str):
    """The file that says the metadata database was migrated for this Airflow version."""
    db = airflow_db()
    return home() / (f".migrated-{version}" if db == AIRFLOW_DB else f".migrated-{db}-{version}")


def _migrated(version: str) -> bool:
    try:
        return _stamp(version).exists() and _has_schema(airflow_db())
    except psycopg2.Error:  # Postgres down or not answering: not known to be migrated
        return False


def _has_schema(db: str) -> bool:
    """Whether `db` holds an Airflow metadata schema (of any version); False when there is
    no such database. Any other error raises: on a busy machine a slow login must not pass
    for a database without a schema (which makes `up` migrate where it would copy)."""
    try:
        conn = psycopg2.connect(postgres.dsn(db=db), connect_timeout=30)
    except psycopg2.OperationalError as exc:
        if f'database "{db}" does not exist' in str(exc):
            return False
        raise
    with closing(conn), conn.cursor() as cur:
        cur.execute("select to_regclass('alembic_version') is not null")
        return bool(cur.fetchone()[0])


def up(env: dict[str, str]) -> None:
    """Make AIRFLOW_HOME and migrate the metadata database when needed. A database that
    holds no schema yet (the tests' Airflow's, the bench's: TWOPHASE_AIRFLOW_DB) becomes a
    copy of MIGRATED, a database as `airflow db migrate` of this Airflow left it before
    anything used it (a second, where the migration takes ~30 s); the first migration of
    each Airflow version makes MIGRATED."""
    import airflow

    version, db = airflow.__version__, airflow_db()
    home().mkdir(parents=True, exist_ok=True)
    if _migrated(version):
        return
    with open(home() / ".migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one migration or copy at a time (tests start them side by side)
        template, fresh = home() / f".migrated-template-{version}", not _has_schema(db)
        if fresh and template.exists() and _has_schema(MIGRATED):
            print(f"stack: Airflow's metadata database {db}: a copy of {MIGRATED}, migrated", flush=True)
            postgres.main().copy_database(MIGRATED, db)
        else:
            print("stack: migrating Airflow's metadata database (first time: ~30 s)", flush=True)
            proc = subprocess.run([str(venv_bin() / "airflow"), "db", "migrate"], env=env, capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                raise StackError(f"airflow db migrate failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            if fresh:  # as the migration left it: nothing has used it, no session holds it
                postgres.main().copy_database(db, MIGRATED)
                template.touch()
        _stamp(version).touch()


def status() -> str:
    import airflow

    return f"home {home()}, metadata DB " + ("migrated" if _migrated(airflow.__version__) else "not migrated")
