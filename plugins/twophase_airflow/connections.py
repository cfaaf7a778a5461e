"""The core's Connections, from Airflow connections (never from code or logs)."""

from __future__ import annotations

from psycopg2.extensions import make_dsn

from twophase.spec import Connections, SpecError


def from_airflow(pg_conn_id: str, kafka_conn_id: str) -> Connections:
    """Postgres: a `postgres` connection (host, port, schema = database, login, password).
    Kafka: any connection whose extra has `bootstrap.servers` (the Kafka provider's shape).
    The password is registered with Airflow's secrets masker, so a log line quoting it
    shows *** instead."""
    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret

    pg = BaseHook.get_connection(pg_conn_id)
    if pg.password:
        mask_secret(pg.password)
    dsn = make_dsn(host=pg.host or "localhost", port=pg.port or 5432, dbname=pg.schema or "postgres",
                   user=pg.login, password=pg.password or None)
    servers = BaseHook.get_connection(kafka_conn_id).extra_dejson.get("bootstrap.servers")
    if not servers:
        raise SpecError(f"Airflow connection {kafka_conn_id!r} has no 'bootstrap.servers' in its extra")
    return Connections(dsn, servers)
