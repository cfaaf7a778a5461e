"""Which raw client errors mean a server is down or refused a grant, in one place: each
step runs its server calls inside `servers()`, which raises them as KafkaUnreachable or
PostgresUnreachable (a Transient: "retry later") and MissingPrivilege (naming the grant,
twophase.privileges), and lets every other error through unchanged."""

from __future__ import annotations

from contextlib import contextmanager

from .errors import KafkaUnreachable, MissingPrivilege, PostgresUnreachable, ServerUnreachable, one_line
from .privileges import explain

def kafka_unreachable(bootstrap: str, exc: BaseException, seen: str = "") -> KafkaUnreachable | None:
    """exc as KafkaUnreachable when it means no broker answered, else None.

    `seen`: what the client's connection log saw (e.g. "Connect to ipv4#... failed:
    Connection refused"), which says more than "Local: Broker transport failure"."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaUnreachable):
        return exc
    if not isinstance(exc, KafkaException) or not exc.args or not isinstance(exc.args[0], KafkaError):
        return None
    err = exc.args[0]
    down = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE, KafkaError._TIMED_OUT,
            KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT_QUEUE, KafkaError.BROKER_NOT_AVAILABLE,
            KafkaError.NETWORK_EXCEPTION, KafkaError.REQUEST_TIMED_OUT}
    if err.code() not in down:
        return None
    what = "is unreachable" if seen or err.code() != KafkaError._TIMED_OUT else "did not answer in time"
    because = f"{seen} ({err.str()})" if seen else err.str()
    return KafkaUnreachable(one_line(f"Kafka at {bootstrap} {what}: {because}; start it (or fix the connection's "
                                     "bootstrap.servers) and retry"))


def postgres_unreachable(dsn: str, exc: BaseException) -> PostgresUnreachable | None:
    """exc as PostgresUnreachable when it means the server did not answer (connection
    refused or lost, server starting or shutting down, too many connections), else None.
    Names host and port only: the DSN holds the password."""
    import psycopg2

    if isinstance(exc, PostgresUnreachable):
        return exc
    if not isinstance(exc, psycopg2.OperationalError):
        return None
    code = getattr(exc, "pgcode", None)
    # Connection failures have no SQLSTATE; 57P*: shutting down or starting; 53300: too many connections.
    if code is not None and not code.startswith("57P") and code != "53300":
        return None
    down = PostgresUnreachable(one_line(f"Postgres at {postgres_address(dsn)} is unreachable: {one_line(exc)}; "
                                        "start it (or fix the connection) and retry"))
    down.first_line = next((line.strip() for line in str(exc).splitlines() if line.strip()), "no message")
    return down


def postgres_address(dsn: str) -> str:
    """host:port of a DSN, never its password."""
    from psycopg2.extensions import parse_dsn

    try:
        parts = parse_dsn(dsn)
    except Exception:  # noqa: BLE001 - a DSN psycopg2 cannot parse: say so, not what it holds
        return "<unparsable DSN>"
    return f"{parts.get('host', 'localhost')}:{parts.get('port', '5432')}"


@contextmanager
def servers(pg_dsn: str | None = None, kafka_bootstrap: str | None = None):
    """Raise a raw client error that means a server is down as ServerUnreachable, and
    Postgres' "permission denied" as MissingPrivilege naming the grant (both from None:
    their one line is the whole story); let every other error through unchanged."""
    try:
        yield
    except (ServerUnreachable, MissingPrivilege):
        raise
    except Exception as exc:
        mapped = ((kafka_bootstrap and kafka_unreachable(kafka_bootstrap, exc))
                  or (pg_dsn and _missing_privilege(pg_dsn, exc))
                  or (pg_dsn and postgres_unreachable(pg_dsn, exc)))
        if not mapped:
            raise
        raise mapped from None


def _missing_privilege(dsn: str, exc: BaseException) -> MissingPrivilege | None:
    """A refused statement (SQLSTATE 42501) or login (no CONNECT on the database) as
    MissingPrivilege naming the grant; None for any other error."""
    import psycopg2

    if not isinstance(exc, psycopg2.Error):
        return None
    if exc.pgcode != "42501" and "permission denied for database" not in str(exc):
        return None
    return explain(dsn, exc)
