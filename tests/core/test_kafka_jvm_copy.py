"""The Kafka commit copy in a JVM (kafka/jvm_copy.py) beside the one in this process.

The contract suite runs every participant test against it too (harness `kafka-jvm`), the
crash matrix kills its driver mid-copy and after its commit ("jvm: " cases), and
test_refusals runs the copy's timeouts in both. Here:

- a copy large enough for the JVM takes it, and publishes exactly the staged records,
  headers and all, as the Python copy does;
- where the JVM cannot run (a JDK's java refuses its options, the classes do not compile
  against the classpath), the copy runs in Python, and the task log says why;
- a copy whose records its producer refuses publishes nothing, and the commit's retry
  publishes every record once;
- a JVM told to quit while stuck in a call halts itself: the driver does not wait for it.
"""

from __future__ import annotations

import logging
import socket

import pytest

from support import header, make_df, make_spec, read_topic, table_of, topic_of
from twophase.participants.kafka import jvm_copy
from twophase.participants.kafka.copy import CopyJob
from twophase.protocol import coordinator
from twophase.protocol.coordinator import RetryLater
from twophase.protocol.states import State
from support import count_table_rows

ROWS = 3000


def _load(spark, txlog, conns, target):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, spec.load_id)
    load = txlog.get(spec.load_id)
    assert load.state == State.COMMITTED, load.reason
    return spec


def test_a_copy_over_the_threshold_runs_in_a_jvm_and_publishes_what_was_staged(spark, txlog, conns, target,
                                                                              monkeypatch, caplog):
    monkeypatch.setenv(jvm_copy.MIN_RECORDS_ENV, str(ROWS))
    with caplog.at_level(logging.INFO, logger="twophase.kafka.copy"):
        spec = _load(spark, txlog, conns, target)
    assert f"commit copy: {ROWS} records, in a JVM" in caplog.text
    records = read_topic(conns.kafka_bootstrap, topic_of(spec).topic)
    assert len(records) == ROWS and {header(m, "load_id") for m in records} == {spec.load_id}
    assert sorted(m.key().decode() for m in records) == [f"c{i:06d}" for i in range(ROWS)]
    assert count_table_rows(conns.pg_dsn, table_of(spec).table, spec.load_id) == ROWS
    assert "copying in Python instead" not in caplog.text


@pytest.mark.parametrize("broken", ["java refuses its options", "classes do not compile"])
def test_where_the_jvm_cannot_run_the_copy_runs_in_python_and_says_why(spark, txlog, conns, target, monkeypatch,
                                                                       caplog, tmp_path, broken):
    monkeypatch.setenv(jvm_copy.MIN_RECORDS_ENV, "0")
    if broken == "java refuses its options":
        monkeypatch.setenv(jvm_copy.JAVA_OPTIONS_ENV, "-XX:+NoSuchOption")
        says = "Unrecognized VM option 'NoSuchOption'"
    else:
        monkeypatch.setenv(jvm_copy.CLASSPATH_ENV, str(tmp_path / "no-kafka-clients.jar"))
        monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path))  # a fresh compile, not the cached classes
        says = "compiling StagedCopy.java failed"
    with caplog.at_level(logging.WARNING, logger="twophase.kafka.copy"):
        spec = _load(spark, txlog, conns, target)
    assert says in caplog.text and "copying in Python instead" in caplog.text, caplog.text
    records = read_topic(conns.kafka_bootstrap, topic_of(spec).topic)
    assert len(records) == ROWS and {header(m, "load_id") for m in records} == {spec.load_id}


def test_a_copy_whose_records_the_producer_refuses_publishes_nothing_and_the_retry_publishes_once(
        spark, txlog, conns, target, monkeypatch):
    """The copy's producer refuses every record (a request size limit below any
    record's): each send fails, the transaction turns to an error state and its commit is
    refused. The copy is aborted, the commit names the error and stays to be retried;
    once the producer takes records again, the retry publishes every record once. (The
    Java client reports a refused record in its send's future, not by raising, so the
    error reaches the copy at its commit.)"""
    monkeypatch.setenv(jvm_copy.MIN_RECORDS_ENV, "0")
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING

    settings = jvm_copy.java_producer_settings
    monkeypatch.setattr(jvm_copy, "java_producer_settings",
                        lambda *args: {**settings(*args), "max.request.size": 100})
    with pytest.raises(RetryLater, match="in an error state"):
        coordinator.commit(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.COMMITTING
    assert read_topic(conns.kafka_bootstrap, topic_of(spec).topic, "read_uncommitted") == []

    monkeypatch.setattr(jvm_copy, "java_producer_settings", settings)
    coordinator.commit(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.COMMITTED
    records = read_topic(conns.kafka_bootstrap, topic_of(spec).topic)
    assert sorted(m.key().decode() for m in records) == [f"c{i:06d}" for i in range(ROWS)]
    assert count_table_rows(conns.pg_dsn, table_of(spec).table, spec.load_id) == ROWS


def test_a_jvm_told_to_quit_while_stuck_in_a_call_halts_itself_and_the_driver_does_not_wait():
    """The copy's JVM starts its transactions against a port where no broker listens, so its
    main thread waits in the call (up to max.block.ms, a minute). The driver's exit tells it
    to quit and returns at once; the JVM halts itself (exit code 4) its quit limit later."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{free.getsockname()[1]}"
    argv = jvm_copy.command(jvm_copy.MIN_RECORDS)
    assert argv, f"{jvm_copy.CLASSPATH_ENV} is not set: run the tests with the stack's environment"
    argv.insert(1, "-Dtwophase.copy.quit_ms=2000")
    with jvm_copy.JvmCopy(CopyJob("load-stuck", [], [], 0), argv, nowhere, "copy-stuck", 60_000, None) as jvm:
        pass
    assert jvm.process.poll() is None, "the driver waited for the JVM to end"
    assert jvm.process.wait(30) == 4
