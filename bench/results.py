"""Measured figures of one shape and size: raw repetitions, and medians, min and max.

A repetition records seconds per contender (keys below) and the peak RSS per Spark
contender. "peer.both_*" is the per-repetition sum of the JDBC write and the Kafka write
of that repetition: the peer writing both targets, one after the other.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

SCAN = "scan"
JDBC_DEFAULT, JDBC_TUNED, KAFKA_WRITER = "peer.jdbc_default", "peer.jdbc_tuned", "peer.kafka_writer"
BOTH_DEFAULT, BOTH_TUNED = "peer.both_default", "peer.both_tuned"
COPY, PRODUCER_TOOL = "limit.copy", "limit.producer_tool"
PEERS = (JDBC_DEFAULT, JDBC_TUNED, KAFKA_WRITER, BOTH_DEFAULT, BOTH_TUNED)
LIMITS = (COPY, PRODUCER_TOOL)
RSS_GROUPS = (SCAN, JDBC_DEFAULT, JDBC_TUNED, KAFKA_WRITER, "atomic")


def atomic(phase: str) -> str:
    return f"atomic.{phase}"


def attach(phase: str) -> str:
    """A phase of the atomic load whose table publishes by ATTACH PARTITION (bench/atomic.py)."""
    return f"atomic_attach.{phase}"


def breakdown(variant: str) -> str:
    """A pass of the staging breakdown (bench/staging.py)."""
    return f"staging.{variant}"


def iceberg(phase: str) -> str:
    """A phase of the Iceberg figures (bench/iceberg.py): setup, pyarrow_alone, staging, prepare, commit."""
    return f"iceberg.{phase}"


@dataclass
class Run:
    shape: str
    rows: int
    partitions: int
    avg_record_bytes: int
    reps: list[dict] = field(default_factory=list)  # {"seconds": {key: s}, "rss": {group: {kind: bytes}}, ...}

    def add(self, seconds: dict[str, float], rss: dict[str, dict], extra: dict | None = None) -> None:
        seconds = dict(seconds)
        seconds[BOTH_DEFAULT] = seconds[JDBC_DEFAULT] + seconds[KAFKA_WRITER]
        seconds[BOTH_TUNED] = seconds[JDBC_TUNED] + seconds[KAFKA_WRITER]
        self.reps.append({"seconds": seconds, "rss": rss, **(extra or {})})

    def values(self, key: str) -> list[float]:
        return [r["seconds"][key] for r in self.reps if key in r["seconds"]]

    def has(self, key: str) -> bool:
        return bool(self.values(key))

    def median(self, key: str) -> float:
        return statistics.median(self.values(key))

    def min(self, key: str) -> float:
        return min(self.values(key))

    def max(self, key: str) -> float:
        return max(self.values(key))

    def rate(self, key: str) -> float:
        """Rows per second at the median time."""
        return self.rows / self.median(key)

    def peak_rss(self, group: str, kind: str) -> int:
        """Largest peak over the repetitions, bytes."""
        return max((r["rss"].get(group, {}).get(kind, 0) for r in self.reps), default=0)

    def to_json(self) -> dict:
        return {"shape": self.shape, "rows": self.rows, "partitions": self.partitions,
                "avg_record_bytes": self.avg_record_bytes, "reps": self.reps}
