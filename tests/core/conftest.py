"""Fixtures of the core's integration tests: a Spark session, a target table and topic."""

from __future__ import annotations

import psycopg2
import pytest

from twophase.log import TransactionLog
from twophase.spec import Connections

from spark_session import spark  # noqa: F401  (the session-scoped Spark fixture)


@pytest.fixture(scope="session")
def conns(pg_dsn, kafka_bootstrap) -> Connections:
    return Connections(pg_dsn, kafka_bootstrap)


@pytest.fixture(scope="session")
def txlog(pg_dsn) -> TransactionLog:
    log = TransactionLog(pg_dsn)
    log.ensure_schema()
    return log


@pytest.fixture
def target(pg_dsn, unique_name):
    """A fresh target table (schema core_tests) and topic name for one test."""
    table = f"core_tests.{unique_name}"
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("create schema if not exists core_tests")
        cur.execute(f"""create table {table} (
            customer_id text not null, day date not null, orders int not null,
            revenue numeric(12, 2), note text, load_id text not null,
            primary key (customer_id, day))""")
    return {"table": table, "topic": unique_name.replace("_", "-")}
