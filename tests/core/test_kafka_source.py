"""The Kafka source (twophase/sources/kafka.py) against the stack's broker, on what cannot be
exactly once unless it is loud: an open transaction (the range stops before it), offsets
deleted before any load read them (and an operator's skip of them, `skip-deleted`), a
re-created topic, added partitions, a topic that does not exist; and a first load from a
timestamp."""

from __future__ import annotations

import getpass
import re
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.sources import Range, SourceError
from twophase.sources.kafka import KafkaSource
from twophase.spec import LoadSpec


@pytest.fixture
def topic(kafka_bootstrap, unique_name):
    name = unique_name.replace("_", "-")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)])[name].result()
    yield name
    admin.delete_topics([name])


def reader(bootstrap, topic, **settings):
    return KafkaSource(topic, group=f"g-{topic}", **settings).open(Connections("", kafka_bootstrap=bootstrap))


def produce(bootstrap, topic, n, partition=0, transactional=None, commit=True):
    conf = {"bootstrap.servers": bootstrap, **({"transactional.id": transactional} if transactional else {})}
    producer = Producer(conf)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for i in range(n):
        producer.produce(topic, f"r{i}".encode(), partition=partition)
    if transactional and commit:
        producer.commit_transaction(30)
    producer.flush(30)
    return producer


def test_the_range_ends_before_an_open_transaction_and_the_next_load_reads_it(kafka_bootstrap, topic):
    produce(kafka_bootstrap, topic, 3)
    open_tx = produce(kafka_bootstrap, topic, 4, transactional=f"tx-{topic}", commit=False)
    produce(kafka_bootstrap, topic, 2)  # after the open transaction: not stable yet either
    src = reader(kafka_bootstrap, topic)
    first = src.fix([])
    assert first.position["partitions"]["0"] == [0, 3], first.position  # the last stable offset, not the end
    open_tx.commit_transaction(30)
    # The commit's markers reach the partition a moment after commit_transaction returns: the
    # last stable offset moves then (until it does, the range still ends before them).
    deadline = time.monotonic() + 30
    while (second := src.fix([first])).position["partitions"]["0"][1] < 3 + 4 + 1 + 2:
        assert time.monotonic() < deadline, f"the last stable offset never passed the transaction: {second.position}"
        time.sleep(0.2)
    assert second.position["partitions"]["0"][0] == 3
    assert src.follows([first], second) == []


def test_offsets_deleted_before_any_load_read_them_refuse_the_load_naming_them(kafka_bootstrap, topic):
    produce(kafka_bootstrap, topic, 5)
    src = reader(kafka_bootstrap, topic)
    first = src.fix([])
    first = type(first).from_json({**first.to_json(), "position": {
        **first.position, "partitions": {**first.position["partitions"], "0": [0, 2]}}})  # it read two
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)].result()  # a retention
    with pytest.raises(SourceError, match=r"retention deleted offsets no load read: partition 0 offsets 2..3"):
        src.fix([first])
    skipped = src.deleted([first])
    assert skipped.position["partitions"] == {"0": [2, 4], "1": [0, 0]} and skipped.records == 2
    assert src.follows([first], skipped) == [] and src.deleted([first, skipped]) is None
    assert src.fix([first, skipped]).position["partitions"] == {"0": [4, 5], "1": [0, 0]}


def test_an_operator_skips_deleted_offsets_with_the_cli_and_the_next_load_starts_after_them(
        kafka_bootstrap, topic, pg_dsn, unique_name):
    produce(kafka_bootstrap, topic, 6)
    source, log, conns = KafkaSource(topic, group=f"g-{topic}"), PostgresLog(pg_dsn), Connections.from_env()
    spec = LoadSpec(load_id=load_id_for(unique_name, "run-1"), pipeline=unique_name, run_id="run-1",
                    targets=(PostgresTarget("core_tests.never_written"),), source=source)
    first = coordinator.begin(log, spec, conns)  # reads 0..5 of partition 0; the log says it committed
    for state in (State.PREPARED, State.COMMITTING, State.COMMITTED):
        log.transition(first.load_id, state)
    produce(kafka_bootstrap, topic, 4)  # offsets 6..9, of which a retention deletes 6..7
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 8)])[TopicPartition(topic, 0, 8)].result()
    second = replace(spec, load_id=load_id_for(unique_name, "run-2"), run_id="run-2")
    with pytest.raises(SourceError, match=rf"partition 0 offsets 6..7: .* python -m twophase skip-deleted "
                                          rf"'{re.escape(source.key)}'"):
        coordinator.begin(log, second, conns)

    cli = [sys.executable, "-m", "twophase", "skip-deleted", source.key]
    skipped = subprocess.run([*cli, "--reason", "retention outran the pipeline"], capture_output=True, text=True,
                             timeout=120)
    assert skipped.returncode == 0, skipped.stderr
    assert f"skipped {source.key}: 2 offset(s), partition 0 6..8, partition 1 0..0" in skipped.stdout
    assert f"by {getpass.getuser()}: retention outran the pipeline" in skipped.stdout
    [skip] = log.skips(source.key)
    assert (skip.by, skip.why) == (getpass.getuser(), "retention outran the pipeline")
    again = subprocess.run([*cli, "--reason", "twice"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "nothing to skip" in again.stderr
    assert Range.from_json(coordinator.begin(log, second, conns).source_range).position["partitions"] == {
        "0": [8, 10], "1": [0, 0]}


def test_a_re_created_topic_is_refused(kafka_bootstrap, topic):
    produce(kafka_bootstrap, topic, 2)
    src = reader(kafka_bootstrap, topic)
    first = src.fix([])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([topic])[topic].result()
    for _ in range(60):  # the deletion completes in the background
        try:
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result()
            break
        except Exception:  # noqa: BLE001 - still being deleted
            time.sleep(0.5)
    deadline = time.monotonic() + 30  # created: until the broker's metadata has the new topic
    while admin.list_topics(topic, timeout=10).topics[topic].error is not None:
        assert time.monotonic() < deadline, f"the re-created topic {topic} never showed in the metadata"
        time.sleep(0.2)
    with pytest.raises(SourceError, match="the topic was deleted and created again"):
        src.fix([first])


def test_added_partitions_are_read_from_offset_0(kafka_bootstrap, topic):
    produce(kafka_bootstrap, topic, 2)
    src = reader(kafka_bootstrap, topic)
    first = src.fix([])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result()
    for _ in range(60):
        second = src.fix([first])
        if "2" in second.position["partitions"]:
            break
        time.sleep(0.5)
    produce(kafka_bootstrap, topic, 3, partition=2)
    second = src.fix([first])
    assert second.position["partitions"]["2"] == [0, 3] and "partition(s) [2] added" in second.note
    assert src.follows([first], second) == []
    shifted = type(second).from_json({**second.to_json(), "position": {
        **second.position, "partitions": {**second.position["partitions"], "2": [1, 3]}}})
    assert src.follows([first], shifted) == [f"kafka:default/{topic}#g-{topic}: partition 2 is new and must be "
                                             "read from offset 0, not 1"]


def test_a_first_load_from_a_timestamp_starts_at_its_first_offset(kafka_bootstrap, topic):
    produce(kafka_bootstrap, topic, 3)
    time.sleep(0.05)
    since = datetime.now(timezone.utc)
    time.sleep(0.05)
    produce(kafka_bootstrap, topic, 2)
    fixed = reader(kafka_bootstrap, topic, start=since.isoformat()).fix([])
    assert fixed.position["partitions"]["0"] == [3, 5] and fixed.position["partitions"]["1"] == [0, 0]


def test_a_topic_that_does_not_exist_is_named(kafka_bootstrap, unique_name):
    with pytest.raises(SourceError, match="the topic does not exist"):
        reader(kafka_bootstrap, f"no-such-{unique_name}".replace("_", "-")).fix([])


def test_bad_settings_are_refused_where_the_source_is_made():
    with pytest.raises(SourceError, match="group must name who reads it"):
        KafkaSource("orders", group="")
    with pytest.raises(SourceError, match="start must be 'earliest' or an ISO timestamp"):
        KafkaSource("orders", group="g", start="yesterday")
    with pytest.raises(SourceError, match="cap must be a whole number"):
        KafkaSource("orders", group="g", cap=-1)
