"""A server that is down is "retry later" with one readable line, in every step.

One load goes through the protocol while, step by step, a participant's server does not
answer: the step raises coordinator.RetryLater naming the server (never a client library's
error), the load stays where it was, and the same step with the server back goes on.
"Down" is a port nobody listens on (connection refused, as for a stopped server); the
transaction log stays on the stack's Postgres, and the shared servers are never stopped.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

from support import make_df, make_spec, read_topic, table_of, topic_of
from twophase.connections import Connections
from twophase.ops import recovery
from twophase.protocol import coordinator
from twophase.protocol.states import State
from support import count_table_rows

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _kafka_patience(monkeypatch):
    """A step gives up on a Kafka that does not answer after TWOPHASE_KAFKA_TIMEOUT_S (30 s
    by default): a few seconds here, where nothing will answer, so the test waits seconds."""
    monkeypatch.setenv("TWOPHASE_KAFKA_TIMEOUT_S", "5")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line_naming(exc: BaseException, server: str) -> str:
    text = str(exc)
    assert "\n" not in text and f"{server} is unreachable: " in text, text
    for raw in ("KafkaError{", "cimpl", "OperationalError", "Traceback"):
        assert raw not in text, text
    return text


def test_each_step_retries_later_while_a_server_is_down(spark, txlog, conns, target):
    kafka_down = Connections(conns.pg_dsn, f"127.0.0.1:{_closed_port()}")
    port = _closed_port()
    pg_down = Connections(f"host=127.0.0.1 port={port} dbname=twophase user=twophase password=not-shown",
                          conns.kafka_bootstrap)
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 100))

    # vote: the live check of the staged ranges needs Kafka.
    with pytest.raises(coordinator.RetryLater) as raised:
        coordinator.vote(txlog, kafka_down, spec.load_id)
    _one_line_naming(raised.value, f"Kafka at {kafka_down.kafka_bootstrap}")
    assert txlog.get(spec.load_id).state == State.PREPARED
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING

    # commit, Kafka down: nothing copied, still COMMITTING; recovery says the same.
    with pytest.raises(coordinator.RetryLater) as raised:
        coordinator.commit(txlog, kafka_down, spec.load_id)
    text = _one_line_naming(raised.value, f"Kafka at {kafka_down.kafka_bootstrap}")
    assert text.startswith("kafka: retry later; ") and "Connection refused" in text
    action = recovery._resolve(txlog, kafka_down, txlog.get(spec.load_id), timedelta(hours=2), None)
    assert action.action == "retry later" and f"Kafka at {kafka_down.kafka_bootstrap} is unreachable" in action.detail
    assert txlog.get(spec.load_id).state == State.COMMITTING
    assert read_topic(conns.kafka_bootstrap, topic_of(spec).topic) == []

    # commit, Postgres down: Kafka's copy commits, COMMIT PREPARED waits; the DSN's password is never shown.
    with pytest.raises(coordinator.RetryLater) as raised:
        coordinator.commit(txlog, pg_down, spec.load_id)
    text = _one_line_naming(raised.value, f"Postgres at 127.0.0.1:{port}")
    assert text.startswith("postgres: retry later; ") and "not-shown" not in text
    assert "(meanwhile kafka: done; records=100, " in text
    assert txlog.get(spec.load_id).state == State.COMMITTING
    assert count_table_rows(conns.pg_dsn, table_of(spec).table, spec.load_id) == 0

    outcomes = coordinator.commit(txlog, conns, spec.load_id)
    assert [(o.participant, o.kind.value) for o in outcomes] == [("kafka", "already done"), ("postgres", "done")]
    assert txlog.get(spec.load_id).state == State.COMMITTED
    assert count_table_rows(conns.pg_dsn, table_of(spec).table, spec.load_id) == 100
    assert len(read_topic(conns.kafka_bootstrap, topic_of(spec).topic)) == 100


def test_prepare_with_kafka_down_logs_why_and_rolls_back_once_it_is_back(spark, txlog, conns, target):
    kafka_down = Connections(conns.pg_dsn, f"127.0.0.1:{_closed_port()}")
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    with pytest.raises(Exception) as raised:
        coordinator.prepare(txlog, kafka_down, spec.load_id, make_df(spark, 10))
    _one_line_naming(raised.value, f"Kafka at {kafka_down.kafka_bootstrap}")
    load = txlog.get(spec.load_id)
    assert load.prepare_error.startswith(f"KafkaUnreachable: Kafka at {kafka_down.kafka_bootstrap} is unreachable: "
                                         f"Connect to ipv4#{kafka_down.kafka_bootstrap} failed: Connection refused")
    assert coordinator.vote(txlog, kafka_down, spec.load_id).reason == f"prepare failed: {load.prepare_error}"

    # The rollback fences Kafka's copy: it waits for Kafka, and has dropped Postgres' staging meanwhile.
    with pytest.raises(coordinator.RetryLater) as raised:
        coordinator.rollback(txlog, kafka_down, spec.load_id)
    text = _one_line_naming(raised.value, f"Kafka at {kafka_down.kafka_bootstrap}")
    assert "(meanwhile postgres: done; prepared_transaction=none, staged_rows_dropped=0; in " in text, text
    assert txlog.get(spec.load_id).state == State.ABORTING
    coordinator.rollback(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTED
