"""The pipeline's Postgres for the Transactions page: the Airflow connection
`twophase_postgres`, else TWOPHASE_PG_DSN. The DSN is never logged or shown."""

from __future__ import annotations

import os

from psycopg2.extensions import make_dsn

CONN_ID = "twophase_postgres"
CONNECT_TIMEOUT_S = 5  # a page must not hang the api-server's threads on an unreachable server


class NoConnection(LookupError):
    pass


def pg_dsn(conn_id: str = CONN_ID) -> str:
    """Looked up on each call (a changed connection applies without a restart).

    Uses the core model's secrets lookup (environment variables, secrets backends, the
    metadata DB), which works in the api-server process; the Task SDK's BaseHook is
    meant for task execution."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        conn = Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        conn = None
    if conn is not None:
        dsn = make_dsn(host=conn.host or "localhost", port=conn.port or 5432, dbname=conn.schema or "postgres",
                       user=conn.login, password=conn.password or None)
    else:
        dsn = os.environ.get("TWOPHASE_PG_DSN", "")
        if not dsn:
            raise NoConnection(f"no Airflow connection {conn_id!r} and TWOPHASE_PG_DSN is not set")
    return make_dsn(dsn, connect_timeout=CONNECT_TIMEOUT_S)
