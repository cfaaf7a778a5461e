"""A prepared load that waits for its vote holds nothing on its targets.

Between prepare and the vote a load may wait for long (an audit, a person's approval, a
slow scheduler). While it waits: no prepared transaction of it exists, it holds no lock on
a target table (a concurrent writer updates the very rows it will replace), and the
target topic has no open transaction (its last stable offset is its end). Only the vote
takes them (ready), so the exposure window the log records is the vote's ready plus the
commit. Staging must survive the wait, or the vote must name what was lost: a clean
Postgres restart keeps unlogged staging tables; a crash restart empties them, and the vote
then aborts naming the table, with nothing visible and nothing left behind.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg2
import pytest

from support import count_table_rows, make_df, make_spec, table_of, topic_ends, topic_of
from throwaway_postgres import throwaway_postgres
from twophase.connections import Connections
from twophase.gates import approval
from twophase.ids import load_id_for
from twophase.ops import recovery
from twophase.participants.postgres import PostgresTarget, prepared_gids, staging_tables
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spec import LoadSpec

ROWS = 400


def _query(dsn: str, sql: str, *args):
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(sql, args or None)
        return cur.fetchall() if cur.description else None


@pytest.mark.slow
def test_a_prepared_load_holds_nothing_while_it_waits_and_the_vote_takes_it(spark, txlog, conns, target, pg_dsn,
                                                                          kafka_bootstrap):
    table = target["table"]
    _query(pg_dsn, f"insert into {table} values ('c000001', '2026-11-20', 1, 1.00, 'before', 'earlier')")
    spec = make_spec(target, mode="replace", replace_where={"day": "2026-11-20"})
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    load = txlog.get(spec.load_id)
    assert load.state == State.PREPARED and load.exposed_at is None

    # Waiting: nothing prepared, no lock on the table, no open transaction on the topic.
    assert [g for g in prepared_gids(pg_dsn) if spec.load_id in g] == []
    assert _query(pg_dsn, "select count(*) from pg_locks where relation = %s::regclass", table) == [(0,)]
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:  # a writer of the rows the load replaces
        cur.execute("set lock_timeout = '2s'")
        cur.execute(f"update {table} set note = 'written while the load waited' where day = '2026-11-20'")
        assert cur.rowcount == 1
    topic = topic_of(spec).topic
    assert topic_ends(kafka_bootstrap, topic, "read_committed") == topic_ends(kafka_bootstrap, topic, "read_uncommitted")

    decided = coordinator.vote(txlog, conns, spec.load_id)
    assert decided.state == State.COMMITTING and decided.exposed_at is not None
    assert [g for g in prepared_gids(pg_dsn) if spec.load_id in g], "ready() prepares the transaction"
    coordinator.commit(txlog, conns, spec.load_id)

    load = txlog.get(spec.load_id)
    assert load.state == State.COMMITTED
    assert load.prepared_at < load.exposed_at < load.finished_at
    exposure = (load.finished_at - load.exposed_at).total_seconds()
    assert exposure < (load.finished_at - load.began_at).total_seconds()
    assert count_table_rows(pg_dsn, table_of(spec).table, spec.load_id) == ROWS
    assert _query(pg_dsn, f"select count(*) from {table} where load_id = 'earlier'") == [(0,)], "replaced at commit"


@pytest.fixture(scope="module")
def restartable():
    with throwaway_postgres("max_prepared_transactions = 10") as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("crash", [False, True], ids=["clean restart", "crash restart"])
def test_a_postgres_restart_while_the_load_waits(spark, txlog, pg_dsn, kafka_bootstrap, restartable, unique_name, crash):
    table = f"public.{unique_name}"
    _query(restartable.dsn, f"""create table {table} (customer_id text not null, day date not null,
        orders int not null, revenue numeric(12, 2), note text, load_id text not null)""")
    conns = Connections(pg_dsn, kafka_bootstrap, {"waiting": ("postgres", restartable.dsn)})
    spec = LoadSpec(load_id=load_id_for("core_tests", unique_name), pipeline="core_tests", run_id=unique_name,
                    targets=(PostgresTarget(table, connection="waiting"),))
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    assert txlog.get(spec.load_id).state == State.PREPARED

    restartable.restart(crash=crash)

    decided = coordinator.vote(txlog, conns, spec.load_id)
    if not crash:
        assert decided.state == State.COMMITTING, decided.reason
        coordinator.commit(txlog, conns, spec.load_id)
        assert txlog.get(spec.load_id).state == State.COMMITTED
        assert count_table_rows(restartable.dsn, table, spec.load_id) == ROWS
    else:
        assert decided.state == State.ABORTING
        assert "staging of " + table in decided.reason and "holds 0 rows, not the 400 staged" in decided.reason, \
            decided.reason
        assert "crash restart" in decided.reason
        coordinator.rollback(txlog, conns, spec.load_id)
        assert txlog.get(spec.load_id).state == State.ABORTED
        assert count_table_rows(restartable.dsn, table, spec.load_id) == 0
    assert [g for g in prepared_gids(restartable.dsn) if spec.load_id in g] == []
    assert spec.load_id not in staging_tables(restartable.dsn).values()


@pytest.mark.slow
def test_recovery_leaves_a_load_waiting_for_approval_and_counts_its_deadline_from_the_answer(spark, txlog, conns,
                                                                                          target, unique_name,
                                                                                          pg_dsn):
    spec = make_spec(target, pipeline=f"approval_{unique_name}"[:60])
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 50))
    approval.ask_approval(txlog, spec.load_id, timedelta(hours=2))  # a person may answer for two hours
    later = datetime.now(timezone.utc) + timedelta(hours=3)  # past the deadline counted from its begin

    [waiting] = recovery.recover(txlog, conns, now=later - timedelta(minutes=5), pipeline=spec.pipeline,
                                 deadline=timedelta(hours=2))[:1]
    assert (waiting.load_id, waiting.action) == (spec.load_id, "waiting"), waiting
    assert "waiting for approval since" in waiting.detail and "after its approval's answer or timeout" in waiting.detail

    approval.answer_approval(txlog, spec.load_id, False, later - timedelta(hours=2, minutes=1), by="bob")
    [aborted] = recovery.recover(txlog, conns, now=later, pipeline=spec.pipeline, deadline=timedelta(hours=2))[:1]
    assert (aborted.load_id, aborted.action) == (spec.load_id, "presumed abort"), aborted
    load = txlog.get(spec.load_id)
    assert load.state == State.ABORTED and "after its approval's answer or timeout" in load.reason
    assert count_table_rows(pg_dsn, table_of(spec).table, spec.load_id) == 0
