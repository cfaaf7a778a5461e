"""KafkaTarget refuses the topic names Kafka refuses, with a message that says what to
change, and accepts the ones Kafka accepts (checked against the stack's broker with a
validate-only CreateTopics, which creates nothing)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from twophase.participants.kafka import KafkaTarget
from twophase.spec import SpecError

REFUSED = [
    ("..", "kafka topic '..' is a name Kafka refuses ('.' and '..' are not topic names): choose another"),
    (".", "kafka topic '.' is a name Kafka refuses ('.' and '..' are not topic names): choose another"),
    ("", "kafka topic must be a non-empty name, got ''"),
    ("orders daily", "kafka topic 'orders daily' has characters Kafka refuses in topic names: use only letters, "
                     "digits, '.', '_' and '-'"),
    ("t" * 250, "is 250 characters long; Kafka allows at most 249: choose a shorter name"),
]


def broker_verdict(bootstrap: str, topic: str) -> KafkaError | None:
    """The broker's answer to creating `topic` (validate only: nothing is created)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.create_topics([NewTopic(topic, 1, 1)], validate_only=True, request_timeout=30).values()
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        return exc.args[0]
    return None


@pytest.mark.parametrize("topic, message", REFUSED)
def test_kafka_target_refuses_what_kafka_refuses(topic, message, kafka_bootstrap):
    with pytest.raises(SpecError) as refused:
        KafkaTarget(topic, "customer_id", staging_topic="staging-of-a-test")
    assert message in str(refused.value)
    if topic:  # the broker agrees (an empty name never reaches it: the client refuses it)
        verdict = broker_verdict(kafka_bootstrap, topic)
        assert verdict is not None and verdict.code() == KafkaError.TOPIC_EXCEPTION, verdict


def test_the_longest_name_kafka_accepts_is_accepted(kafka_bootstrap):
    topic = "t" * 249
    assert KafkaTarget(topic, "customer_id", staging_topic="staging-of-a-test").topic == topic
    assert broker_verdict(kafka_bootstrap, topic) is None


def test_the_derived_staging_topic_must_fit_too():
    assert KafkaTarget("t" * 232, "customer_id").staging_topic == "t" * 232 + ".twophase-staging"
    with pytest.raises(SpecError) as refused:
        KafkaTarget("t" * 233, "customer_id")
    assert ("is 233 characters long: its staging topic (the name plus '.twophase-staging') would exceed Kafka's "
            "limit of 249; shorten the topic name to at most 232 characters or set staging_topic") in str(refused.value)
    with pytest.raises(SpecError, match="kafka staging topic '..' is a name Kafka refuses"):
        KafkaTarget("orders", "customer_id", staging_topic="..")


@pytest.mark.parametrize("key_column", ["customer id", "1st", "a.b", ""])
def test_the_key_column_must_be_a_plain_identifier(key_column):
    with pytest.raises(SpecError, match="must be a plain identifier"):
        KafkaTarget("orders", key_column)


@pytest.mark.parametrize("partitions", [0, -1, "3", 1.5, True])
def test_partitions_must_be_a_whole_number_of_at_least_one(partitions):
    with pytest.raises(SpecError, match="kafka partitions must be a whole number of at least 1"):
        KafkaTarget("orders", "customer_id", partitions=partitions)


@pytest.mark.parametrize("replicas", [0, -1, "3", 1.5, True])
def test_a_replication_factor_is_a_whole_number_of_at_least_one_or_none(replicas):
    with pytest.raises(SpecError, match=r"kafka replication_factor must be a whole number of at least 1, got .* "
                                        r"\(or None: the broker's default\)"):
        KafkaTarget("orders", "customer_id", replication_factor=replicas)
    assert KafkaTarget("orders", "customer_id").replication_factor is None  # the broker's default


@pytest.mark.parametrize("config, message", [
    ({"min insync": "2"}, "kafka topic_config key 'min insync' is not a Kafka topic setting name"),
    ({"Min.Insync.Replicas": "2"}, "is not a Kafka topic setting name"),
    ({"min.insync.replicas": ""}, "kafka topic_config min.insync.replicas must be a string or a whole number"),
    ({"min.insync.replicas": True}, "must be a string or a whole number, got True"),
    ("min.insync.replicas=2", "kafka topic_config must be a dict of Kafka topic settings"),
])
def test_topic_config_is_checked(config, message):
    with pytest.raises(SpecError, match=message):
        KafkaTarget("orders", "customer_id", topic_config=config)


def test_the_staging_topic_keeps_its_retention_whatever_topic_config_says():
    target = KafkaTarget("orders", "customer_id", topic_config={"min.insync.replicas": 2, "cleanup.policy": "compact",
                                                                 "retention.ms": "60000"})
    assert target.topic_config == {"min.insync.replicas": "2", "cleanup.policy": "compact", "retention.ms": "60000"}
    assert target.staging_config() == {"min.insync.replicas": "2", "cleanup.policy": "delete",
                                       "retention.ms": str(target.staging_retention_ms)}
