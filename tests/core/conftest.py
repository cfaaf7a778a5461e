"""Fixtures of the core's integration tests: a Spark session, a target table and topic."""

from __future__ import annotations

import psycopg2
import pytest

from twophase.log import PostgresLog, TransactionLog
from support import REPORTING, create_schema, drop_iceberg_table
from twophase.connections import Connections



@pytest.fixture(scope="session")
def conns(pg_dsn, kafka_bootstrap) -> Connections:
    return Connections(pg_dsn, kafka_bootstrap)


@pytest.fixture(scope="session")
def txlog(pg_dsn) -> TransactionLog:
    log = PostgresLog(pg_dsn)
    log.ensure_schema()
    return log


@pytest.fixture
def target(pg_dsn, unique_name):
    """A fresh target table (schema core_tests) and topic name for one test."""
    table = f"core_tests.{unique_name}"
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "core_tests")
        cur.execute(f"""create table {table} (
            customer_id text not null, day date not null, orders int not null,
            revenue numeric(12, 2), note text, load_id text not null,
            primary key (customer_id, day))""")
    return {"table": table, "topic": unique_name.replace("_", "-")}


@pytest.fixture(scope="session")
def many_conns(pg_dsn, kafka_bootstrap, reporting_dsn, iceberg_catalog) -> Connections:
    """The servers, with the second database as the named connection `reporting`, and the
    stack's Iceberg catalog as the default one."""
    return Connections(pg_dsn, kafka_bootstrap, {REPORTING: ("postgres", reporting_dsn)},
                       iceberg_catalog=iceberg_catalog)


@pytest.fixture
def many(pg_dsn, reporting_dsn, unique_name):
    """Fresh tables for support.many_spec: per-customer and summary in the log's database,
    per-customer in the reporting database; two fresh topic names; the name of a fresh
    Iceberg table (the load creates it; purged after the test)."""
    tables = {"orders": f"core_tests.{unique_name}", "summary": f"core_tests.{unique_name}_sum",
              "reporting": f"core_tests.{unique_name}_rep"}
    per_customer = """(customer_id text not null, day date not null, orders int not null, revenue numeric(12, 2),
                       note text, load_id text not null, primary key (customer_id, day))"""
    for dsn, name in ((pg_dsn, "orders"), (reporting_dsn, "reporting")):
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            create_schema(cur, "core_tests")
            cur.execute(f"create table {tables[name]} {per_customer}")
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"create table {tables['summary']} (day date primary key, orders bigint not null, "
                    "customers bigint not null, load_id text not null)")
    topic = unique_name.replace("_", "-")
    yield {**tables, "topic": topic, "topic2": f"{topic}-eu", "iceberg": f"core_tests.{unique_name}"}
    drop_iceberg_table(f"core_tests.{unique_name}")
