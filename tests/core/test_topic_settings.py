"""Topics a load creates get the target's settings: the broker's replication factor unless
the target names one, and its topic_config on the topic and on its staging topic (which
keeps the protocol's retention and never compacts). Checked by describing the topics on
the stack's broker."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource

from twophase.participants.kafka import ensure_topics
from twophase.participants.kafka import KafkaTarget


def _described(bootstrap: str, topic: str) -> tuple[int, dict[str, str]]:
    """(replicas of partition 0, the topic's settings) as the broker reports them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    replicas = len(admin.list_topics(topic, timeout=30).topics[topic].partitions[0].replicas)
    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)],
                                      request_timeout=30).values()
    return replicas, {name: entry.value for name, entry in future.result(60).items()}


def test_a_created_topic_has_the_targets_settings_and_the_brokers_replication(kafka_bootstrap, unique_name):
    topic = unique_name.replace("_", "-")
    target = KafkaTarget(topic, "customer_id", partitions=2,
                         topic_config={"min.insync.replicas": "1", "compression.type": "zstd",
                                       "cleanup.policy": "compact", "retention.ms": "3600000"})
    limits = ensure_topics(kafka_bootstrap, target)
    assert set(limits) == {target.topic, target.staging_topic}

    replicas, settings = _described(kafka_bootstrap, target.topic)
    assert replicas == 1  # the broker's default.replication.factor (one broker here)
    assert {k: settings[k] for k in target.topic_config} == target.topic_config

    replicas, staging = _described(kafka_bootstrap, target.staging_topic)
    assert replicas == 1
    assert staging["min.insync.replicas"] == "1" and staging["compression.type"] == "zstd"
    assert staging["cleanup.policy"] == "delete", "the staging topic must never compact its records away"
    assert staging["retention.ms"] == str(target.staging_retention_ms)

    # An existing topic is left as it is: a second load's settings change nothing.
    ensure_topics(kafka_bootstrap, KafkaTarget(topic, "customer_id", topic_config={"compression.type": "gzip"}))
    assert _described(kafka_bootstrap, target.topic)[1]["compression.type"] == "zstd"
