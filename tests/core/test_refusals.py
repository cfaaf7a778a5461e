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
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg2
import pytest
from confluent_kafka.admin import AdminClient

from support import make_df, make_spec, read_topic, table_of, topic_of, with_target
from twophase import coordinator
from twophase.participants.postgres import PostgresConfigError, is_prepared
from twophase.spec import Connections
from twophase.states import State
from support import count_table_rows
from twophase.verify import verify

ROOT = Path(__file__).resolve().parents[2]
BROKER_MAX_TIMEOUT_MS = 3_600_000  # the stack's transaction.max.timeout.ms (scripts/localstack/settings.py)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def no_prepare_dsn():
    """A throwaway Postgres cluster with max_prepared_transactions = 0; stopped and deleted after."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from localstack.postgres import _as_server_user, _chown_to_server_user, bindir
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    bin_ = bindir()
    assert bin_ is not None, "PostgreSQL server binaries not found under /usr/lib/postgresql"
    # Run as root, the server runs as `postgres`, which must own (and reach) its folder.
    home = Path(tempfile.mkdtemp(prefix="twophase-noprepare-",
                                 dir="/var/lib/postgresql" if os.geteuid() == 0 else None))
    data, port = home / "data", _free_port()
    _chown_to_server_user(home)

    def run(*cmd):
        proc = subprocess.run(_as_server_user([str(c) for c in cmd]), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{cmd[0]} failed:\n{proc.stdout}{proc.stderr}"

    try:
        run(bin_ / "initdb", "-D", data, "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8", "--auth=trust")
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{home}'\n"
                       "max_prepared_transactions = 0\nfsync = off\n")
        run(bin_ / "pg_ctl", "start", "-w", "-t", "60", "-D", data, "-l", home / "postgres.log")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            run(bin_ / "pg_ctl", "stop", "-w", "-m", "immediate", "-D", data)
        shutil.rmtree(home, ignore_errors=True)


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
