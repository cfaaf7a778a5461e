"""First loads on a brand-new server, at once: every process that finds the participant's
schemas and tables (or the transaction log's) missing creates them, and none fails on the
catalog's unique index because another created them first (ids.CREATING_LOCK). Against
the stack's Postgres, in a database of its own, made and dropped by the test."""

from __future__ import annotations

import threading
import uuid
from contextlib import closing

import psycopg2
import pytest
from psycopg2.extensions import make_dsn

from twophase import ids
from twophase.log import PostgresLog
from twophase.participants.postgres.server import DECISIONS, MARKERS, creating, ensure_schemas

ROUNDS, AT_ONCE = 6, 6


def _admin(dsn: str, statement: str) -> None:
    with closing(psycopg2.connect(dsn)) as conn:
        conn.autocommit = True
        conn.cursor().execute(statement)


@pytest.fixture
def fresh_db(admin_dsn):
    name = f"twophase_race_{uuid.uuid4().hex[:8]}"
    _admin(admin_dsn, f"create database {name}")
    try:
        yield make_dsn(admin_dsn, dbname=name)
    finally:
        _admin(admin_dsn, f"drop database {name} with (force)")


def _at_once(jobs) -> list[BaseException]:
    """Run the jobs in threads released together; the errors they raised."""
    start, errors = threading.Barrier(len(jobs)), []

    def run(job):
        start.wait()
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 - every error is the finding
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def test_first_loads_at_once_create_the_schemas_without_failing(fresh_db):
    def participant(last_resource: bool):
        def job():
            with closing(psycopg2.connect(fresh_db)) as conn:
                conn.autocommit = True
                ensure_schemas(conn.cursor(), last_resource)
        return job

    def target_table():
        with closing(psycopg2.connect(fresh_db)) as conn, conn, conn.cursor() as cur, creating(cur):
            cur.execute("create schema if not exists web; create table if not exists web.t (a int)")

    for _ in range(ROUNDS):
        _admin(fresh_db, f"drop schema if exists twophase, {ids.STAGING_SCHEMA}, web cascade")
        jobs = [participant(i % 2 == 0) for i in range(AT_ONCE)]
        errors = _at_once([*jobs, PostgresLog(fresh_db).ensure_schema, target_table, target_table])
        assert not errors, errors
        with closing(psycopg2.connect(fresh_db)) as conn, conn.cursor() as cur:
            cur.execute("select to_regclass(%s), to_regclass(%s), to_regnamespace(%s), to_regclass('web.t'), "
                        "to_regclass('twophase.loads')", (MARKERS, DECISIONS, ids.STAGING_SCHEMA))
            assert all(cur.fetchone())
