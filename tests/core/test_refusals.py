"""Loads the servers cannot carry are refused loudly, and leave nothing behind.

- Postgres with max_prepared_transactions = 0 (a throwaway cluster this module starts)
  cannot take part in a two-phase commit: prepare fails with an error naming
  max_prepared_transactions before anything is written (no staging schema or table, no
  target rows, no prepared transaction, no Kafka topic), the load never reaches PREPARED,
  and the vote then aborts it.
- A Kafka commit copy whose transaction_timeout_ms is above the broker's
  transaction.max.timeout.ms, or too short for the copy, is aborted: commit raises
  LoadAborted naming transaction.max.timeout.ms, the load ends ABORTED, nothing is visible
  in the target topic (read_committed) or table, no prepared transaction is left, and
  verify passes.
"""

from __future__ import annotations

import dataclasses

import psycopg2
import pytest
from confluent_kafka.admin import AdminClient

from support import make_df, make_spec, read_topic, table_of, topic_of, with_target
from throwaway_postgres import throwaway_postgres
from twophase import coordinator
from twophase.participants.postgres import PostgresConfigError, is_prepared
from twophase.spec import Connections
from twophase.states import State
from support import count_table_rows
from twophase.verify import verify

BROKER_MAX_TIMEOUT_MS = 3_600_000  # the stack's transaction.max.timeout.ms (scripts/localstack/settings.py)


@pytest.fixture(scope="module")
def no_prepare_dsn():
    """A throwaway Postgres cluster with max_prepared_transactions = 0; stopped and deleted after."""
    with throwaway_postgres("max_prepared_transactions = 0") as server:
        yield server.dsn


def _query(dsn: str, sql: str, *args):
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(sql, args or None)
        return cur.fetchall() if cur.description else None


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def test_postgres_without_prepared_transactions_is_refused_before_anything_is_written(
        spark, txlog, conns, no_prepare_dsn, unique_name):
    table = f"public.{unique_name}"
    _query(no_prepare_dsn, f"""create table {table} (customer_id text not null, day date not null,
        orders int not null, revenue numeric(12, 2), note text, load_id text not null)""")
    assert _query(no_prepare_dsn, "show max_prepared_transactions") == [("0",)]
    refused = Connections(no_prepare_dsn, conns.kafka_bootstrap)
    spec = make_spec({"table": table, "topic": unique_name.replace("_", "-")})
    coordinator.begin(txlog, spec)

    with pytest.raises(PostgresConfigError, match="max_prepared_transactions = 0") as raised:
        coordinator.prepare(txlog, refused, spec.load_id, make_df(spark, 100))
    assert "Nothing was written" in str(raised.value)

    assert txlog.get(spec.load_id).state == State.PREPARING, "the load must not reach PREPARED"
    assert txlog.votes(spec.load_id) == {}
    assert _query(no_prepare_dsn, "select nspname from pg_namespace where nspname like 'twophase%'") == [], \
        "no staging (or marker) schema may be created"
    assert _query(no_prepare_dsn, f"select count(*) from {table}") == [(0,)]
    assert _query(no_prepare_dsn, "select count(*) from pg_prepared_xacts") == [(0,)]
    assert not {topic_of(spec).topic, topic_of(spec).staging_topic} & _topics(conns.kafka_bootstrap), \
        "Postgres is checked first: no Kafka topic may be created"

    decided = coordinator.vote(txlog, refused, spec.load_id)
    assert decided.state == State.ABORTING and "prepare" in decided.reason
    coordinator.rollback(txlog, refused, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTED


def _commit_must_abort(txlog, conns, spec, df):
    """Prepare and decide COMMIT, then commit: it must abort with a reason naming the limit."""
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, df)
    gid = txlog.votes(spec.load_id)["postgres"].committable["gid"]
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING

    with pytest.raises(coordinator.LoadAborted, match="transaction.max.timeout.ms"):
        coordinator.commit(txlog, conns, spec.load_id)

    load = txlog.get(spec.load_id)
    assert load.state == State.ABORTED and load.decision == "ABORT", (load.state, load.reason)
    assert "transaction.max.timeout.ms" in load.reason
    assert [t.to_state for t in txlog.history(spec.load_id)] == [
        "PREPARING", "PREPARED", "COMMITTING", "ABORTING", "ABORTED"]
    assert not is_prepared(conns.pg_dsn, gid)
    assert count_table_rows(conns.pg_dsn, table_of(spec).table, spec.load_id) == 0
    assert read_topic(conns.kafka_bootstrap, topic_of(spec).topic) == []
    [finding] = verify(txlog, conns, [load])
    assert finding.ok and not any(finding.visible.values()), finding
    return load


def test_transaction_timeout_above_the_brokers_limit_aborts_the_load(spark, txlog, conns, target):
    spec = make_spec(target)
    spec = with_target(spec, dataclasses.replace(topic_of(spec), transaction_timeout_ms=BROKER_MAX_TIMEOUT_MS + 1))
    load = _commit_must_abort(txlog, conns, spec, make_df(spark, 500))
    assert "is above the broker's transaction.max.timeout.ms" in load.reason


# The copy's deadline is 90% of transaction_timeout_ms, here 1000 ms (the least librdkafka
# accepts). Copying this many records takes about 3 s here (some 5 µs a record), so a
# machine would have to copy over three times faster to finish in time; the deadline is
# checked after the last batch too.
SLOW_RECORDS = 600_003


@pytest.mark.slow
def test_copy_slower_than_its_transaction_timeout_aborts_the_load(spark, txlog, conns, target):
    spec = make_spec(target)
    spec = with_target(spec, dataclasses.replace(topic_of(spec), transaction_timeout_ms=1000))
    load = _commit_must_abort(txlog, conns, spec, make_df(spark, SLOW_RECORDS))
    assert "was too short" in load.reason
    # The aborted copy did write to the target topic; read_uncommitted shows it, so
    # the empty read_committed view above is the transaction's doing, not a copy that never ran.
    assert len(read_topic(conns.kafka_bootstrap, topic_of(spec).topic, "read_uncommitted")) > 0
