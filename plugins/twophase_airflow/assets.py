"""The Airflow Assets a commit emits, one per target.

Identity must not depend on where a DAG file is parsed, so the URI names the Airflow
connection (the server) and the object, in the project's own `x-twophase` scheme:
downstream DAGs schedule on `table_asset(...)` / `topic_asset(...)` built the same way.
The names are checked with the core's rules, so a misspelt one fails the DAG file's
import instead of naming an asset no load will ever emit.
"""

from __future__ import annotations

from airflow.sdk import Asset

from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import check_topic
from twophase.participants.postgres import PostgresTarget
from twophase.spec import SpecError


def _asset(caller: str, kind: str, name: str, conn_id: str, check) -> Asset:
    """The Asset of `name` on connection `conn_id`, once `check(name)` (the core's rule)
    accepts it; its SpecError is raised naming `caller`."""
    try:
        check(name)
    except SpecError as exc:
        raise SpecError(f"{caller}: {exc}") from None
    return Asset(name=f"{kind}:{name}", uri=f"x-twophase-{kind}://{conn_id}/{name}")


def table_asset(table: str, pg_conn_id: str = "twophase_postgres") -> Asset:
    if not isinstance(table, str):
        raise SpecError(f"table_asset: table must be a string like 'schema.table', got {table!r}")
    return _asset("table_asset", "postgres", table, pg_conn_id, PostgresTarget)


def topic_asset(topic: str, kafka_conn_id: str = "twophase_kafka") -> Asset:
    return _asset("topic_asset", "kafka", topic, kafka_conn_id, check_topic)


def iceberg_asset(table: str, iceberg_conn_id: str = "twophase_iceberg") -> Asset:
    if not isinstance(table, str):
        raise SpecError(f"iceberg_asset: table must be a string like 'namespace.table', got {table!r}")
    return _asset("iceberg_asset", "iceberg", table, iceberg_conn_id, IcebergTarget)


def asset_of(target) -> Asset:
    """The Asset a commit emits for a Table, Topic or IcebergTable (twophase_airflow.targets)."""
    make = {"postgres": table_asset, "kafka": topic_asset, "iceberg": iceberg_asset}[target.kind]
    return make(target.name, target.conn_id)
