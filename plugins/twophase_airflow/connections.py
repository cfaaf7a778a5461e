"""The core's Connections, from Airflow connections (never from code or logs)."""

from __future__ import annotations

from contextlib import contextmanager

from psycopg2.extensions import make_dsn, parse_dsn

from twophase.errors import PostgresUnreachable, postgres_unreachable
from twophase.spec import Connections, SpecError

from .targets import DEFAULT_KAFKA


def from_airflow(log_conn_id: str, others: dict[str, str] | None = None, lookup: bool = False) -> Connections:
    """The log's Postgres (`log_conn_id`, also the default database of tables), the default
    Kafka cluster (connection `twophase_kafka`, when it exists) and `others` ({connection
    id: kind}) by name. Postgres: a `postgres` connection (host, port, schema = database,
    login, password). Kafka: any connection whose extra has `bootstrap.servers` (the Kafka
    provider's shape). Passwords are registered with Airflow's secrets masker, so a log
    line quoting one shows *** instead. `lookup`: other connections are found by name when
    a load names them (recovery, which finishes loads of every pipeline)."""
    from airflow.exceptions import AirflowNotFoundException

    named = {conn_id: (kind, _address(kind, conn_id)) for conn_id, kind in (others or {}).items()}
    try:
        kafka = _address("kafka", DEFAULT_KAFKA)
    except AirflowNotFoundException:
        kafka = ""  # no default cluster: a topic must name its connection (Connections.address says so)
    return Connections(_address("postgres", log_conn_id), kafka, named, _lookup if lookup else None)


def _lookup(conn_id: str) -> tuple[str, str]:
    """(kind, address) of an Airflow connection: a postgres one, or one with bootstrap.servers."""
    from airflow.sdk import BaseHook

    kind = "postgres" if BaseHook.get_connection(conn_id).conn_type in ("postgres", "postgresql") else "kafka"
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
    servers = conn.extra_dejson.get("bootstrap.servers")
    if not servers:
        raise SpecError(f"Airflow connection {conn_id!r} has no 'bootstrap.servers' in its extra")
    return servers


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
