"""The stack's stock Postgres: configured as PostgreSQL ships, so it cannot prepare
transactions, beside the pipeline's server, which can (scripts/localstack/postgres.py)."""

from contextlib import closing

import psycopg2
import pytest
from psycopg2 import errors

from support import localstack

settings = localstack("settings")
# Who is logged in, to which database (and who owns it), on which server.
WHO = ("select current_user, current_database(), pg_get_userbyid(datdba), inet_server_port() "
       "from pg_database where datname = current_database()")


def _one(dsn, sql):
    """The first row of `sql`, run in a session of its own and committed."""
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        conn.autocommit = True
        cur.execute(sql)
        return cur.fetchone() if cur.description else None


@pytest.fixture
def table(stock_dsn, unique_name):
    _one(stock_dsn, f"create table {unique_name} (id int primary key)")
    yield unique_name
    _one(stock_dsn, f"drop table {unique_name}")


def test_both_databases_answer_the_pipeline_role_on_a_server_of_their_own(pg_dsn, stock_dsn, stock_reports_dsn):
    (main_port,) = _one(pg_dsn, "select inet_server_port()")
    for dsn, db in ((stock_dsn, settings.STOCK_DB), (stock_reports_dsn, settings.STOCK_REPORTS_DB)):
        user, database, owner, port = _one(dsn, WHO)
        assert (user, database, owner) == (settings.PIPELINE_ROLE, db, settings.PIPELINE_ROLE)
        assert port != main_port, f"{db} is on the pipeline's server (port {port})"


def test_stock_server_runs_with_the_settings_of_settings_py(stock_dsn):
    shown = {key: _one(stock_dsn, f"show {key}")[0] for key in settings.POSTGRES_STOCK_SERVER_SETTINGS}
    assert shown == settings.POSTGRES_STOCK_SERVER_SETTINGS
    assert shown["max_prepared_transactions"] == "0"


def test_prepare_transaction_fails_on_the_stock_server(stock_dsn, table):
    with closing(psycopg2.connect(stock_dsn)) as conn:
        with conn.cursor() as cur:
            cur.execute(f"insert into {table} values (1)")
            with pytest.raises(errors.ObjectNotInPrerequisiteState, match="prepared transactions are disabled"):
                cur.execute("prepare transaction %s", (f"{table}:prepare",))
        conn.rollback()
    assert _one(stock_dsn, f"select count(*) from {table}") == (0,)
    assert _one(stock_dsn, "select count(*) from pg_prepared_xacts") == (0,)


def test_pipeline_server_still_prepares(pg_dsn):
    shown = {key: _one(pg_dsn, f"show {key}")[0] for key in settings.POSTGRES_SERVER_SETTINGS}
    assert shown == settings.POSTGRES_SERVER_SETTINGS
    assert shown["max_prepared_transactions"] == "64"
