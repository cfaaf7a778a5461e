"""The core's Connections, from Airflow connections (never from code or logs)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from urllib.parse import urlsplit

from psycopg2.extensions import make_dsn, parse_dsn

from twophase.errors import PostgresUnreachable, postgres_unreachable
from twophase.spec import Connections, SpecError

from .targets import DEFAULT_ICEBERG, DEFAULT_KAFKA

# Keys of an Iceberg catalog's properties whose values are secrets (masked in task logs).
_SECRET_KEYS = ("password", "secret", "credential", "token", "key")


def from_airflow(log_conn_id: str, others: dict[str, str] | None = None, lookup: bool = False) -> Connections:
    """The log's Postgres (`log_conn_id`, also the default database of tables), the default
    Kafka cluster and Iceberg catalog (connections `twophase_kafka` and `twophase_iceberg`,
    when they exist) and `others` ({connection id: kind}) by name. Postgres: a `postgres`
    connection (host, port, schema = database, login, password). Kafka: any connection
    whose extra has `bootstrap.servers` (the Kafka provider's shape). Iceberg: a connection
    of type `iceberg` whose extra holds pyiceberg's catalog properties. Passwords are
    registered with Airflow's secrets masker, so a log line quoting one shows *** instead.
    `lookup`: other connections are found by name when a load names them (recovery, which
    finishes loads of every pipeline)."""
    named = {conn_id: (kind, _address(kind, conn_id)) for conn_id, kind in (others or {}).items()}
    # No default cluster or catalog: a topic or Iceberg table must name its connection
    # (Connections.address says so).
    return Connections(_address("postgres", log_conn_id), _default("kafka", DEFAULT_KAFKA), named,
                       _lookup if lookup else None, iceberg_catalog=_default("iceberg", DEFAULT_ICEBERG))


def _default(kind: str, conn_id: str) -> str:
    from airflow.exceptions import AirflowNotFoundException

    try:
        return _address(kind, conn_id)
    except AirflowNotFoundException:
        return ""


def _lookup(conn_id: str) -> tuple[str, str]:
    """(kind, address) of an Airflow connection: a postgres one, an iceberg one, or one
    with bootstrap.servers."""
    from airflow.sdk import BaseHook

    conn_type = BaseHook.get_connection(conn_id).conn_type
    kind = {"postgres": "postgres", "postgresql": "postgres", "iceberg": "iceberg"}.get(conn_type, "kafka")
    return kind, _address(kind, conn_id)


def _address(kind: str, conn_id: str) -> str:
    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret

    conn = BaseHook.get_connection(conn_id)
    if kind == "postgres":
        if conn.password:
            mask_secret(conn.password)
        return make_dsn(host=conn.host or "localhost", port=conn.port or 5432, dbname=conn.schema or "postgres",
                        user=conn.login, password=conn.password or None)
    if kind == "iceberg":
        return _catalog(conn_id, conn.extra_dejson)
    servers = conn.extra_dejson.get("bootstrap.servers")
    if not servers:
        raise SpecError(f"Airflow connection {conn_id!r} has no 'bootstrap.servers' in its extra")
    return servers


def _catalog(conn_id: str, props: dict) -> str:
    """An Iceberg connection's catalog properties as the core's address (JSON), with every
    secret in them (a password in the uri, credentials, tokens) masked in task logs."""
    from airflow.sdk.log import mask_secret

    if not isinstance(props, dict) or not props:
        raise SpecError(f"Airflow connection {conn_id!r} has no Iceberg catalog properties in its extra "
                        '(e.g. {"type": "sql", "uri": ..., "warehouse": ...})')
    for key, value in props.items():
        if any(word in key.lower() for word in _SECRET_KEYS) and value:
            mask_secret(str(value))
    password = urlsplit(str(props.get("uri", ""))).password
    if password:
        mask_secret(password)
    return json.dumps(props)


@contextmanager
def log_database(conn_id: str, dsn: str):
    """The transaction log's database (Airflow connection `conn_id`) that cannot be reached
    raises PostgresUnreachable with one readable line naming the connection (the task's
    retries apply). Which errors mean that is the core's rule (errors.postgres_unreachable);
    errors of a reachable server (deadlocks, cancelled queries) pass unchanged."""
    try:
        yield
    except Exception as exc:
        down = postgres_unreachable(dsn, exc)
        if down is None:
            raise
        # libpq's first line says what failed ("... port 1 failed: Connection refused"); the
        # next ones are hints the fix below covers. It never quotes the password, but be sure.
        detail = down.first_line or str(down)
        password = parse_dsn(dsn).get("password")
        if password:
            detail = detail.replace(password, "***")
        raise PostgresUnreachable(
            f"cannot reach Postgres (Airflow connection {conn_id!r}): {detail}; check that the server runs "
            "and that the connection's host, port, database, login and password are right") from None
