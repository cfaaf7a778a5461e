"""Kafka topics in Airflow: the Topic a DAG author lists, its Asset, and the cluster of an
Airflow connection (any connection whose extra has `bootstrap.servers`: the Kafka
provider's shape)."""

from __future__ import annotations

from dataclasses import dataclass

from twophase.participants.kafka import KafkaTarget, check_topic
from twophase.spec import SpecError

from .shared import AirflowKind, check_conn_id, named_asset

DEFAULT_CONN_ID = "twophase_kafka"


@dataclass(frozen=True)
class Topic:
    """A Kafka topic, records keyed by `key_column`, valued by the frame's row as JSON.

    - conn_id: the Airflow connection of its cluster (extra `bootstrap.servers`);
    - frame: which of the job's frames it loads ('' = the main one);
    - partitions, replication_factor (None: the broker's default) and topic_config (Kafka
      topic settings, e.g. {"min.insync.replicas": "2"}): of the topic and its staging
      topic, when the load creates them;
    - schema: {column: Spark type} of its frame (twophase.schema; LoadConfig(schema=...)
      gives it to every target of the main frame): the frame must match it, and each
      record's value holds its columns in its order.
    """

    name: str
    key_column: str
    conn_id: str = DEFAULT_CONN_ID
    frame: str = ""
    partitions: int = 3
    replication_factor: int | None = None
    topic_config: dict | None = None
    schema: dict | None = None
    kind = "kafka"

    def __post_init__(self):
        check_conn_id(self)
        try:
            self.core("append", None, "")
        except (SpecError, TypeError) as exc:
            raise SpecError(f"Topic {self.name!r}: {exc}") from None

    @property
    def load_name(self) -> str:
        """Its name in the load (votes, counts, audit rules)."""
        return self.name

    def core(self, mode: str, interval, connection: str) -> KafkaTarget:
        return KafkaTarget(self.name, self.key_column, partitions=self.partitions,
                           replication_factor=self.replication_factor, topic_config=dict(self.topic_config or {}),
                           connection=connection, frame=self.frame, frame_schema=self.schema or {})


def topic_asset(topic: str, kafka_conn_id: str = DEFAULT_CONN_ID):
    """The Asset a load's commit emits for `topic` of connection `kafka_conn_id`."""
    return named_asset("topic_asset", "kafka", topic, kafka_conn_id, check_topic, DEFAULT_CONN_ID)


def address(conn, conn_id: str) -> str:
    servers = conn.extra_dejson.get("bootstrap.servers")
    if not servers:
        raise SpecError(f"Airflow connection {conn_id!r} has no 'bootstrap.servers' in its extra")
    return servers


def secrets(bootstrap: str) -> set[str]:
    return set()  # bootstrap servers are host:port pairs


KAFKA = AirflowKind("kafka", Topic, DEFAULT_CONN_ID, ("kafka",), address, secrets, topic_asset, any_conn_type=True)
