"""The stack's Postgres really does two-phase commit."""

import psycopg2
import pytest


@pytest.fixture
def table(pg_dsn, unique_name):
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"create table {unique_name} (id int primary key)")
    yield unique_name
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"drop table {unique_name}")


def _count(dsn, table):
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select count(*) from {table}")
        return cur.fetchone()[0]


def _prepare(dsn, table, gid, rows):
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.executemany(f"insert into {table} values (%s)", [(i,) for i in range(rows)])
            cur.execute("prepare transaction %s", (gid,))
    finally:
        conn.close()  # a prepared transaction outlives its session


def _finish(dsn, verb, gid):
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"{verb} prepared %s", (gid,))
    finally:
        conn.close()


def test_max_prepared_transactions_is_enabled(pg_dsn):
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("show max_prepared_transactions")
        assert int(cur.fetchone()[0]) >= 16


def test_commit_prepared_makes_rows_visible_at_once(pg_dsn, table):
    gid = f"{table}:commit"
    _prepare(pg_dsn, table, gid, 100)
    assert _count(pg_dsn, table) == 0, "prepared rows must be invisible before COMMIT PREPARED"
    _finish(pg_dsn, "commit", gid)
    assert _count(pg_dsn, table) == 100


def test_rollback_prepared_discards_rows(pg_dsn, table):
    gid = f"{table}:rollback"
    _prepare(pg_dsn, table, gid, 10)
    _finish(pg_dsn, "rollback", gid)
    assert _count(pg_dsn, table) == 0
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from pg_prepared_xacts where gid = %s", (gid,))
        assert cur.fetchone()[0] == 0
