"""Loads the servers cannot carry are refused loudly, and leave nothing behind.

- Postgres with max_prepared_transactions = 0 (a throwaway cluster this module starts)
  cannot take part in a two-phase commit: prepare fails with an error naming
  max_prepared_transactions before anything is written (no staging schema or table, no
  target rows, no prepared transaction, no Kafka topic), the load never reaches PREPARED,
  and the vote then aborts it.
- A Kafka commit copy whose transaction_timeout_ms is above the broker's
  transaction.max.timeout.ms, or too short for the copy, is aborted (the copy in this
  process or in a JVM alike): commit raises
  LoadAborted naming transaction.max.timeout.ms, the load ends ABORTED, nothing is visible
  in the target topic (read_committed) or table, no prepared transaction is left, and
  verify passes.
- The vote's budgets: a copy estimated (at the pace of the pipeline's earlier copies) to
  outlast most of its transaction's timeout, or staged records that may expire before the
  copy ends, abort the load at the vote, naming the KafkaTarget setting to change, before
  anything is made ready or copied.
"""

from __future__ import annotations

import dataclasses

import psycopg2
import pytest
from confluent_kafka.admin import AdminClient

from support import header, make_df, make_spec, read_topic, table_of, topic_of, with_target
from throwaway_postgres import throwaway_postgres
from twophase.connections import Connections
from twophase.participants.kafka import jvm_copy
from twophase.participants.postgres import PostgresConfigError, is_prepared
from twophase.protocol import coordinator
from twophase.protocol.states import State
from support import count_table_rows
from twophase.ops.verify import verify

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


@pytest.fixture(params=["python", "jvm"])
def copy_in(request, monkeypatch):
    """The Kafka commit copy in this process, or in a JVM (kafka/jvm_copy.py)."""
    monkeypatch.setenv(jvm_copy.MIN_RECORDS_ENV, "0" if request.param == "jvm" else str(10**12))
    return request.param


def test_transaction_timeout_above_the_brokers_limit_aborts_the_load(spark, txlog, conns, target, copy_in):
    spec = make_spec(target)
    spec = with_target(spec, dataclasses.replace(topic_of(spec), transaction_timeout_ms=BROKER_MAX_TIMEOUT_MS + 1))
    load = _commit_must_abort(txlog, conns, spec, make_df(spark, 500))
    assert "is above the broker's transaction.max.timeout.ms" in load.reason


# The copy's deadline is 90% of transaction_timeout_ms, here 1000 ms (the least librdkafka
# accepts). Copying this many records takes about 3 s here in Python (some 5 µs a record)
# and 1.3 s or more in a JVM just started (its JIT not yet warm), so a machine would have
# to copy over 1.5 times faster to finish in time; the deadline is checked after the last
# batch too.
SLOW_RECORDS = 600_003


@pytest.mark.slow
def test_copy_slower_than_its_transaction_timeout_aborts_the_load(spark, txlog, conns, target, copy_in):
    # A pipeline with no earlier copy: no pace to estimate from, so the vote's budget
    # lets it through and the copy's own deadline must abort it.
    spec = make_spec(target, pipeline=f"slow_copy_{target['topic']}")
    spec = with_target(spec, dataclasses.replace(topic_of(spec), transaction_timeout_ms=1000))
    load = _commit_must_abort(txlog, conns, spec, make_df(spark, SLOW_RECORDS))
    assert "was too short" in load.reason
    # The aborted copy did write to the target topic; read_uncommitted shows it, so
    # the empty read_committed view above is the transaction's doing, not a copy that never ran.
    assert len(read_topic(conns.kafka_bootstrap, topic_of(spec).topic, "read_uncommitted")) > 0


def _vote_must_abort(txlog, conns, spec, df, says: str) -> None:
    """Prepare, then the vote aborts naming `says`, before any participant is made ready;
    the rollback leaves nothing: not even an aborted copy in the topic."""
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, df)
    decided = coordinator.vote(txlog, conns, spec.load_id)
    assert decided.state == State.ABORTING and "kafka would not commit in time: " in decided.reason, decided.reason
    assert says in decided.reason, decided.reason
    assert decided.exposed_at is None, "nothing may be made ready"
    coordinator.rollback(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTED
    assert count_table_rows(conns.pg_dsn, table_of(spec).table, spec.load_id) == 0
    assert [m for m in read_topic(conns.kafka_bootstrap, topic_of(spec).topic, "read_uncommitted")
            if header(m, "load_id") == spec.load_id] == [], "the copy must never have begun"


def test_a_copy_estimated_longer_than_its_timeout_is_aborted_by_the_vote(spark, txlog, conns, target):
    pipeline = f"budget_{target['topic']}"
    first = make_spec(target, run_id=f"{target['topic']}-1", pipeline=pipeline)
    coordinator.begin(txlog, first)
    coordinator.prepare(txlog, conns, first.load_id, make_df(spark, 20_000))
    assert coordinator.vote(txlog, conns, first.load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, first.load_id)
    measured = txlog.get(first.load_id).outcomes["kafka"]
    assert measured["kind"] == "done" and measured["count"] == 20_000 and measured["seconds"] > 0
    pace = measured["count"] / measured["seconds"]

    # Twice what the measured pace copies in a second, against a 1 s timeout (80%: 0.8 s).
    records = max(50_000, int(2 * pace))
    second = make_spec(target, run_id=f"{target['topic']}-2", pipeline=pipeline)
    second = with_target(second, dataclasses.replace(topic_of(second), transaction_timeout_ms=1000))
    _vote_must_abort(txlog, conns, second, make_df(spark, records, day="2026-11-21"),
                     f"copying {records} records would take about ")
    assert "raise KafkaTarget.transaction_timeout_ms" in txlog.get(second.load_id).reason


def test_staged_records_that_may_expire_before_the_copy_are_aborted_by_the_vote(spark, txlog, conns, target):
    # A fresh staging topic whose retention (5 minutes) ends within the vote's margin.
    spec = make_spec(target, pipeline=f"budget_{target['topic']}")
    spec = with_target(spec, dataclasses.replace(topic_of(spec), staging_retention_ms=300_000))
    _vote_must_abort(txlog, conns, spec, make_df(spark, 100),
                     f"the staged records in {topic_of(spec).staging_topic} may expire from ")
    assert "(retention.ms 300000)" in txlog.get(spec.load_id).reason
    assert "raise KafkaTarget.staging_retention_ms" in txlog.get(spec.load_id).reason
