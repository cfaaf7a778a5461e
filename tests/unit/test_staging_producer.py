"""The JVM staging producer's buffer pool (KafkaWriter._java_producer): sized to its topic's
partitions, so that the Java client, which keeps every batch buffer it allocated until it
closes, holds no more than a partition's open batch and in-flight batches need."""

from __future__ import annotations

import pytest

from twophase.participants.kafka.writer import STAGING_BUFFER_FLOOR, STAGING_MAX_IN_FLIGHT, KafkaWriter

pytestmark = pytest.mark.serverless

MiB = 1 << 20
FIELDS = [("k", "binary"), ("v", "binary"), ("c", "bigint")]


def buffer_memory(partitions: int, max_message_bytes: int | None = None) -> int:
    writer = KafkaWriter("127.0.0.1:1", "orders.staging", "load-1", {}, max_message_bytes, "orders",
                         ("k", "v", "c"), partitions=partitions)
    return int(writer.jvm_spec(FIELDS)["producer.buffer.memory"])


@pytest.mark.parametrize(("partitions", "max_message_bytes", "expected"), [
    (1, None, STAGING_BUFFER_FLOOR),   # 6 MiB wanted: the floor
    (3, None, 18 * MiB),               # 6 x 3 batches of 1 MiB
    (8, None, 48 * MiB),
    (12, None, 64 * MiB),              # 72 MiB wanted: the Python producer's queue caps it
    (50, 100_000, 6 * 50 * 100_000),  # a topic limit of 100 kB: batches of 100 kB
    (2, 100_000, STAGING_BUFFER_FLOOR),
])
def test_the_pool_holds_six_batches_a_partition_within_its_floor_and_cap(partitions, max_message_bytes, expected):
    assert buffer_memory(partitions, max_message_bytes) == expected


def test_the_commit_copy_keeps_its_own_pool():
    """Only the staging producer is sized so: the copy's producer writes every partition of
    every target from one JVM and keeps java_producer_settings' pool."""
    from twophase.participants.kafka.client import java_producer_settings

    assert java_producer_settings("127.0.0.1:1", None)["buffer.memory"] == 64 * MiB
    assert buffer_memory(3) < 64 * MiB


def test_the_producer_has_a_bounded_number_of_records_in_flight():
    writer = KafkaWriter("127.0.0.1:1", "orders.staging", "load-1", {}, None, "orders", ("k", "v", "c"))
    assert writer.jvm_spec(FIELDS)["max_in_flight"] == str(STAGING_MAX_IN_FLIGHT) == "65536"
