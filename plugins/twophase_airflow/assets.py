"""The Airflow Assets a commit emits, one per target.

Identity must not depend on where a DAG file is parsed, so the URI names the Airflow
connection (the server) and the object, in the project's own `x-twophase` scheme:
downstream DAGs schedule on `table_asset(...)` / `topic_asset(...)` built the same way.
"""

from __future__ import annotations

from airflow.sdk import Asset


def table_asset(table: str, pg_conn_id: str = "twophase_postgres") -> Asset:
    return Asset(name=f"postgres:{table}", uri=f"x-twophase-postgres://{pg_conn_id}/{table}")


def topic_asset(topic: str, kafka_conn_id: str = "twophase_kafka") -> Asset:
    return Asset(name=f"kafka:{topic}", uri=f"x-twophase-kafka://{kafka_conn_id}/{topic}")
