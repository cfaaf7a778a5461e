"""The Airflow Assets a commit emits, one per target.

Identity must not depend on where a DAG file is parsed, so the URI names the Airflow
connection (the server) and the object, in the project's own `x-twophase` scheme:
downstream DAGs schedule on `table_asset(...)` / `topic_asset(...)` built the same way.
The names are checked with the core's rules, so a misspelt one fails the DAG file's
import instead of naming an asset no load will ever emit.
"""

from __future__ import annotations

from airflow.sdk import Asset

from twophase.spec import IcebergTarget, PostgresTarget, SpecError, check_topic


def table_asset(table: str, pg_conn_id: str = "twophase_postgres") -> Asset:
    if not isinstance(table, str):
        raise SpecError(f"table_asset: table must be a string like 'schema.table', got {table!r}")
    try:
        PostgresTarget(table)
    except SpecError as exc:
        raise SpecError(f"table_asset: {exc}") from None
    return Asset(name=f"postgres:{table}", uri=f"x-twophase-postgres://{pg_conn_id}/{table}")


def topic_asset(topic: str, kafka_conn_id: str = "twophase_kafka") -> Asset:
    try:
        check_topic(topic)
    except SpecError as exc:
        raise SpecError(f"topic_asset: {exc}") from None
    return Asset(name=f"kafka:{topic}", uri=f"x-twophase-kafka://{kafka_conn_id}/{topic}")


def iceberg_asset(table: str, iceberg_conn_id: str = "twophase_iceberg") -> Asset:
    if not isinstance(table, str):
        raise SpecError(f"iceberg_asset: table must be a string like 'namespace.table', got {table!r}")
    try:
        IcebergTarget(table)
    except SpecError as exc:
        raise SpecError(f"iceberg_asset: {exc}") from None
    return Asset(name=f"iceberg:{table}", uri=f"x-twophase-iceberg://{iceberg_conn_id}/{table}")


def asset_of(target) -> Asset:
    """The Asset a commit emits for a Table, Topic or IcebergTable (twophase_airflow.targets)."""
    make = {"postgres": table_asset, "kafka": topic_asset, "iceberg": iceberg_asset}[target.kind]
    return make(target.name, target.conn_id)
