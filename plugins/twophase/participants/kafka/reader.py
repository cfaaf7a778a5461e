"""Reading a topic as its consumers do (verify, tests)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Iterator

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from .client import kafka_client, request_timeout_s
from .writer import H_LOAD

def count_topic_by_load(bootstrap: str, topic: str) -> Counter:
    """Records per header load_id in the whole topic, read as read_committed."""
    counts: Counter = Counter()
    for msg in iter_topic(bootstrap, topic):
        load_id = dict(msg.headers() or []).get(H_LOAD)
        counts[load_id.decode() if load_id else None] += 1
    return counts


def iter_topic(bootstrap: str, topic: str, isolation: str = "read_committed") -> Iterator:
    """Every record of the topic visible at this isolation level, up to its end now."""
    with kafka_client(AdminClient, bootstrap) as admin:
        metadata = admin.list_topics(timeout=request_timeout_s())
    if topic not in metadata.topics:
        return
    with kafka_client(Consumer, bootstrap, **{"group.id": f"twophase-verify-{uuid.uuid4().hex}",
                                              "isolation.level": isolation, "enable.auto.commit": False}) as consumer:
        ends = {}
        for p in metadata.topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=request_timeout_s())
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        idle = 0
        while ends and idle < 10:
            msgs = consumer.consume(num_messages=10000, timeout=1.0)
            idle = 0 if msgs else idle + 1
            for msg in msgs:
                if msg.error():
                    raise RuntimeError(f"reading {topic}: {msg.error()}")
                yield msg
            # read_committed stops short of aborted records and transaction markers:
            # a partition is read to its end when the position reaches the end offset.
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    ends.pop(tp.partition)
