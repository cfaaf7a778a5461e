"""Order events produced to a Kafka topic, continuously, for the streaming example
(orders_stream_totals reads them as its source).

    python -m orders_sample.stream --rate 50                 # until Ctrl-C
    python -m orders_sample.stream --rate 200 --count 5000   # 5,000 events, then stops

One record is one order: key the customer id, value {"order_id", "customer_id",
"amount", "ordered_at"} as JSON. Events are sent in transactions of one second's worth
(the topic's offsets then hold transaction markers, as a transactional producer's do),
numbered from the topic's current size so that order ids stay unique over several runs.
The servers: --bootstrap, else TWOPHASE_KAFKA_BOOTSTRAP (scripts/stack env).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
import uuid
from datetime import datetime, timezone

TOPIC = "orders-events"


def events(start: int, count: int, customers: int = 50, seed: int = 25):
    """`count` order events numbered from `start` (the same numbers give the same events)."""
    for n in range(start, start + count):
        rng = random.Random(seed * 1_000_003 + n)
        customer = f"c{rng.randrange(customers):04d}"
        yield customer, {"order_id": f"o{n:09d}", "customer_id": customer,
                         "amount": round(rng.uniform(1, 500), 2),
                         "ordered_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds")}


def ensure_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=30).topics:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result()
        except Exception as exc:  # noqa: BLE001 - created meanwhile by another generator
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def size(bootstrap: str, topic: str) -> int:
    """How many offsets the topic holds now (the next events' first number)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"stream-size-{uuid.uuid4().hex[:8]}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions)
    finally:
        consumer.close()


def produce(bootstrap: str, topic: str, rate: float, count: int | None = None, progress=print) -> int:
    """Send `count` events (None: until interrupted) at `rate` per second; how many were sent."""
    from confluent_kafka import Producer

    ensure_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"orders-stream-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    start, sent, stop = size(bootstrap, topic), 0, []
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    began = time.monotonic()
    while not stop and (count is None or sent < count):
        batch = max(1, int(rate)) if count is None else min(max(1, int(rate)), count - sent)
        producer.begin_transaction()
        for key, value in events(start + sent, batch):
            producer.produce(topic, json.dumps(value).encode(), key=key.encode())
        producer.commit_transaction(30)
        sent += batch
        if sent % max(1, int(rate) * 10) < batch:
            progress(f"orders_sample.stream: {sent} events sent to {topic}")
        ahead = began + sent / rate - time.monotonic()
        if ahead > 0 and (count is None or sent < count):
            time.sleep(ahead)
    progress(f"orders_sample.stream: {sent} events sent to {topic} in {time.monotonic() - began:.1f} s")
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orders_sample.stream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50, help="events per second (default 50)")
    parser.add_argument("--count", type=int, help="stop after this many events (default: until Ctrl-C)")
    parser.add_argument("--topic", default=TOPIC, help=f"the topic (default {TOPIC})")
    parser.add_argument("--bootstrap", default=os.environ.get("TWOPHASE_KAFKA_BOOTSTRAP"),
                        help="Kafka's servers (default: TWOPHASE_KAFKA_BOOTSTRAP)")
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("no Kafka servers: pass --bootstrap or set TWOPHASE_KAFKA_BOOTSTRAP (eval \"$(scripts/stack env)\")")
    if args.rate <= 0 or (args.count is not None and args.count < 0):
        parser.error("--rate must be above 0 and --count 0 or more")
    produce(args.bootstrap, args.topic, args.rate, args.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
