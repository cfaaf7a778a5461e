"""Readers polling the targets while a load commits never see part of it.

Two background threads poll while `coordinator.commit` runs (the Kafka copy, then COMMIT
PREPARED), and for a while after:

- a read_committed consumer of the target topic: each poll reads the topic up to its last
  stable offset and counts the records whose header load_id is the load's;
- a SQL reader on its own autocommit connection: `select count(*) ... where load_id = %s`
  in a tight loop.

Each must see 0, then the full count, and nothing else. The test also proves it was not
vacuous: both pollers ran several polls during the commit before the load was visible and
several after, and the Kafka poller saw the copy's records already written to the topic
(high watermark above 0) while read_committed still showed none of them.

The target topic has one partition: Kafka writes a transaction's commit markers to its
partitions one after the other, so a reader of several partitions may briefly see a
committed transaction in one partition before another; within a partition a transaction
is all or nothing. Had the copy been split into several transactions, a poll would catch
a partial count here.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import psycopg2
from confluent_kafka import Consumer, TopicPartition

from polling import Poller, wait_for
from support import header, make_df, make_spec, topic_of, with_target
from twophase.ops.verify import verify
from twophase.protocol import coordinator
from twophase.protocol.states import State

ROWS = 20_000  # enough for the copy to stream for a noticeable time


class TopicReader:
    """Counts the load's records a read_committed consumer of a one-partition topic sees.

    poll() notes the high watermark (what was written, committed or not), then the last
    stable offset (what read_committed may see), reads up to it and returns (records of
    the load seen so far, high watermark). The offsets are asked by consumers of their
    own: a consumer's offset query waits behind its own fetch, which the broker holds
    for up to fetch.wait.max.ms when there is nothing new.
    """

    def __init__(self, bootstrap: str, topic: str, load_id: str):
        def consumer(isolation):
            return Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                             "isolation.level": isolation, "enable.auto.commit": False,
                             "fetch.wait.max.ms": 10})
        self.reader = consumer("read_committed")
        self.stable, self.written = consumer("read_committed"), consumer("read_uncommitted")
        self.tp, self.load_id, self.count = TopicPartition(topic, 0), load_id, 0
        self.reader.assign([TopicPartition(topic, 0, 0)])

    def _position(self) -> int:
        return max(self.reader.position([self.tp])[0].offset, 0)  # -1001 until the first fetch

    def poll(self) -> tuple[int, int]:
        _, written = self.written.get_watermark_offsets(self.tp, timeout=10)
        _, stable = self.stable.get_watermark_offsets(self.tp, timeout=10)  # read_committed: the LSO
        while self._position() < stable:
            for msg in self.reader.consume(num_messages=1000, timeout=0.05):
                if msg.error() is not None:
                    raise RuntimeError(f"reading {self.tp.topic}: {msg.error()}")
                if header(msg, "load_id") == self.load_id:
                    self.count += 1
        return self.count, written

    def close(self):
        for consumer in (self.reader, self.stable, self.written):
            consumer.close()


def test_readers_see_none_or_all_of_a_committing_load(spark, txlog, conns, target):
    spec = make_spec(target)
    spec = with_target(spec, dataclasses.replace(topic_of(spec), partitions=1))
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING

    topic = TopicReader(conns.kafka_bootstrap, topic_of(spec).topic, spec.load_id)
    sql_conn = psycopg2.connect(conns.pg_dsn)
    sql_conn.autocommit = True
    sql_cur = sql_conn.cursor()

    def count_rows() -> int:
        sql_cur.execute(f"select count(*) from {target['table']} where load_id = %s", (spec.load_id,))
        return sql_cur.fetchone()[0]

    kafka_poller, sql_poller = Poller("kafka", topic.poll), Poller("sql", count_rows)
    try:
        for poller in (kafka_poller, sql_poller):
            poller.start()
        pollers = (kafka_poller, sql_poller)
        wait_for(lambda: len(kafka_poller.samples) >= 5 and len(sql_poller.samples) >= 5, "the first polls", pollers)
        commit_started = time.monotonic()
        coordinator.commit(txlog, conns, spec.load_id)
        commit_ended = time.monotonic()

        def seen_after_commit(poller, full):
            return sum(1 for t, value in poller.samples if t > commit_ended and full(value))
        wait_for(lambda: seen_after_commit(kafka_poller, lambda v: v[0] == ROWS) >= 5
                 and seen_after_commit(sql_poller, lambda v: v == ROWS) >= 20, "polls after the commit", pollers)
    finally:
        for poller in (kafka_poller, sql_poller):
            poller.stop()
        topic.close()
        sql_conn.close()

    for poller in (kafka_poller, sql_poller):
        assert poller.error is None, f"the {poller.name} poller failed: {poller.error!r}"
    assert txlog.get(spec.load_id).state == State.COMMITTED

    kafka = [(t, count, written) for t, (count, written) in kafka_poller.samples]
    for name, samples in (("kafka", [(t, count) for t, count, _ in kafka]), ("sql", sql_poller.samples)):
        counts = [count for _, count in samples]
        assert set(counts) <= {0, ROWS}, f"{name} reader saw a partial load: {sorted(set(counts))}"
        assert counts == sorted(counts), f"{name} reader saw the load, then lost it"
        unseen_during_commit = [t for t, count in samples if t >= commit_started and count == 0]
        assert len(unseen_during_commit) >= 3, f"{name}: {len(unseen_during_commit)} polls during the commit saw 0"
        assert counts.count(ROWS) >= 5, f"{name}: only {counts.count(ROWS)} polls saw the load"

    in_flight = [s for s in kafka if s[1] == 0 and s[2] > 0]
    assert in_flight, "the Kafka poller never caught the copy written but not yet committed"

    [finding] = verify(txlog, conns, [txlog.get(spec.load_id)])
    assert finding.ok and finding.visible == {target["table"]: ROWS, target["topic"]: ROWS}, finding
    print(f"kafka polls: {len(kafka)} ({len(in_flight)} while the copy was written but uncommitted), "
          f"sql polls: {len(sql_poller.samples)}, commit took {commit_ended - commit_started:.2f} s")
