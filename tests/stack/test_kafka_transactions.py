"""The stack's Kafka really does transactions, and read_committed hides aborted ones."""

import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def _create_topic(bootstrap, name):
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)


def _read_all(bootstrap, topic, isolation, expect_at_least=0, timeout=20):
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    values, idle = [], 0
    try:
        while idle < 3 or len(values) < expect_at_least:
            msg = consumer.poll(1.0)
            if msg is None:
                idle += 1
                timeout -= 1
                if timeout <= 0:
                    break
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


def test_read_committed_sees_only_committed_transactions(kafka_bootstrap, unique_name):
    topic = unique_name
    _create_topic(kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)

    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"committed-{i}")
    producer.commit_transaction(30)

    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"aborted-{i}")
    producer.flush(30)  # the aborted records really reach the log
    producer.abort_transaction(30)

    committed = _read_all(kafka_bootstrap, topic, "read_committed", expect_at_least=5)
    assert committed == [f"committed-{i}" for i in range(5)]
    everything = _read_all(kafka_bootstrap, topic, "read_uncommitted", expect_at_least=10)
    assert sorted(v for v in everything if v.startswith("aborted")) == [f"aborted-{i}" for i in range(5)]
