"""The stack's Kafka really does transactions, and read_committed hides aborted ones."""

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from support import read_topic


def _create_topic(bootstrap, name):
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)


def _values(bootstrap, topic, isolation):
    return [m.value().decode() for m in read_topic(bootstrap, topic, isolation)]


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

    committed = _values(kafka_bootstrap, topic, "read_committed")
    assert committed == [f"committed-{i}" for i in range(5)]
    everything = _values(kafka_bootstrap, topic, "read_uncommitted")
    assert sorted(v for v in everything if v.startswith("aborted")) == [f"aborted-{i}" for i in range(5)]
