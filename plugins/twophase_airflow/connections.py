"""The core's Connections, from Airflow connections (never from code or logs), their
secrets, and what prepare's spark-submit takes from the Spark connection."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from psycopg2.extensions import make_dsn, parse_dsn

from twophase.errors import PostgresUnreachable
from twophase.server_errors import postgres_unreachable
from twophase.connections import Connections
from twophase.spec import SpecError

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
    for secret in _catalog_secrets(props):
        mask_secret(secret)
    return json.dumps(props)


def _catalog_secrets(props: dict) -> set[str]:
    """The secrets in an Iceberg catalog's properties: values of secret-looking keys, and
    the password in its uri."""
    found = {str(value) for key, value in props.items() if any(word in key.lower() for word in _SECRET_KEYS) and value}
    password = urlsplit(str(props.get("uri", ""))).password
    return found | {password} if password else found


def secrets_of(conns: Connections) -> set[str]:
    """Every secret the connections hold (Postgres passwords, a catalog's credentials): the
    prepare operator keeps spark-submit's environment free of them."""
    found = set()
    addresses = [("postgres", conns.pg_dsn), ("iceberg", conns.iceberg_catalog), *conns.named.values()]
    for kind, address in addresses:
        if kind == "postgres" and address:
            found.add(parse_dsn(address).get("password") or "")
        elif kind == "iceberg" and address:
            found |= _catalog_secrets(json.loads(address))
    return found - {""}


@dataclass(frozen=True)
class SparkSubmit:
    """Where prepare's spark-submit goes, as the Spark connection says: its master (the
    provider's rule: the host when it holds a URL or there is no port, else
    <conn_type>://host:port), its deploy mode and the Spark settings of its extra (every key
    that starts with `spark.`, e.g. spark.pyspark.python: the executors' Python)."""

    master: str
    deploy_mode: str
    conf: dict

    @property
    def driver_here(self) -> bool:
        """The driver runs on this (the Airflow worker's) host: local master or client mode."""
        return self.master.startswith("local") or self.deploy_mode != "cluster"


def spark_submit(conn_id: str, deploy_mode: str | None = None) -> SparkSubmit:
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    master = f"{master}:{conn.port}" if conn.port else master
    extra = conn.extra_dejson if isinstance(conn.extra_dejson, dict) else {}
    conf = {key: str(value) for key, value in extra.items() if key.startswith("spark.")}
    return SparkSubmit(master, deploy_mode or extra.get("deploy-mode") or "client", conf)


@contextmanager
def log_database(conn_id: str, dsn: str):
    """The transaction log's database (Airflow connection `conn_id`) that cannot be reached
    raises PostgresUnreachable with one readable line naming the connection (the task's
    retries apply). Which errors mean that is the core's rule (server_errors.postgres_unreachable);
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
