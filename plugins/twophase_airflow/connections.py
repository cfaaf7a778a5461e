"""The core's Connections, from Airflow connections (never from code or logs), their
secrets, and what prepare's spark-submit takes from the Spark connection."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from psycopg2.extensions import parse_dsn

from twophase.connections import Connections
from twophase.errors import PostgresUnreachable
from twophase.participants.kinds import KINDS as CORE_KINDS
from twophase.server_errors import postgres_unreachable

from .kinds import KINDS, kind_of_conn_type


def from_airflow(log_conn_id: str, others: dict[str, str] | None = None, lookup: bool = False) -> Connections:
    """The log's Postgres (`log_conn_id`, also the default database of tables), each other
    kind's default server (its default connection, twophase_kafka and twophase_iceberg,
    when it exists) and `others` ({connection id: kind}) by name. What a connection of each
    kind holds is in its module of twophase_airflow.kinds; secrets in it are registered
    with Airflow's secrets masker, so a log line quoting one shows *** instead. `lookup`:
    other connections are found by name when a load names them (recovery, which finishes
    loads of every pipeline)."""
    named = {conn_id: (kind, _address(kind, conn_id)) for conn_id, kind in (others or {}).items()}
    # No default cluster or catalog: a topic or Iceberg table must name its connection
    # (Connections.address says so).
    defaults = {"pg_dsn": _address("postgres", log_conn_id)}
    for name, record in KINDS.items():
        if record.default_conn_id:
            defaults[CORE_KINDS[name].default_server] = _default(name, record.default_conn_id)
    return Connections(named=named, lookup=_lookup if lookup else None, **defaults)


def _default(kind: str, conn_id: str) -> str:
    from airflow.exceptions import AirflowNotFoundException

    try:
        return _address(kind, conn_id)
    except AirflowNotFoundException:
        return ""


def _lookup(conn_id: str) -> tuple[str, str]:
    """(kind, address) of an Airflow connection, its kind from its type."""
    from airflow.sdk import BaseHook

    kind = kind_of_conn_type(BaseHook.get_connection(conn_id).conn_type)
    return kind, _address(kind, conn_id)


def _address(kind: str, conn_id: str) -> str:
    from airflow.sdk import BaseHook

    return KINDS[kind].address(BaseHook.get_connection(conn_id), conn_id)


def secrets_of(conns: Connections) -> set[str]:
    """Every secret the connections hold (Postgres passwords, a catalog's credentials): the
    prepare operator keeps spark-submit's environment free of them."""
    return {secret for kind, address in conns.every_address() for secret in KINDS[kind].secrets(address)}


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
