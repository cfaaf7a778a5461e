"""The audit's view of a topic's staged records: their JSON values, read from the staging
topic's ranges the vote names (this load's records, of the winning attempts only)."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .client import kafka_client
from .copy import _StagedFilter


PATIENCE_S = 60


class StagedRecordsUnread(RuntimeError):
    """The staged ranges could not be read to their end (the cluster stopped answering)."""


def staged_values(bootstrap: str, group: str, load_id: str, copy: dict) -> list[dict]:
    """The decoded values of one topic's staged records (`copy`: its entry of the vote's
    committable["topics"])."""
    ranges = {int(p): r for p, r in copy["ranges"].items()}
    ours = _StagedFilter(load_id, copy["attempts"], ranges, copy["records"])
    values: list[dict] = []
    if not ranges:
        return values
    with kafka_client(Consumer, bootstrap, **{"group.id": group, "enable.auto.commit": False}) as consumer:
        consumer.assign([TopicPartition(copy["staging_topic"], p, r[0]) for p, r in ranges.items()])
        last = {p: r[1] for p, r in ranges.items()}
        quiet_since = time.monotonic()
        while last:
            msgs = consumer.consume(num_messages=10000, timeout=1.0)
            if msgs:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > PATIENCE_S:
                raise StagedRecordsUnread(f"no staged record of {copy['staging_topic']} read for {PATIENCE_S} s; "
                                          f"partitions {sorted(last)} not read to their staged end")
            for msg in msgs:
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                p, offset = msg.partition(), msg.offset()
                if p not in last or offset > last[p]:
                    continue
                if offset == last[p]:
                    del last[p]
                if ours.dense or ours.promotes(msg.headers()):
                    values.append(json.loads(msg.value()))
    return values
