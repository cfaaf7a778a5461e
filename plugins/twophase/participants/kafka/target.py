"""KafkaTarget: a topic a load writes, as plain data (stored with the load in the
transaction log), and the checks of topic names. Depends only on the standard library
and twophase.errors."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ...errors import SpecError
from ...schema import check as check_schema
from ..target_rules import IDENT, check_names

_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
_CONFIG_KEY = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*$")
TOPIC_MAX_LENGTH = 249  # Kafka refuses longer topic names
STAGING_SUFFIX = ".twophase-staging"


@dataclass(frozen=True)
class KafkaTarget:
    """The target topic and its staging topic; records are keyed by `key_column`.

    When the load creates the topics (they are missing): `partitions`; `replication_factor`
    (None: the broker's default.replication.factor); `topic_config`, Kafka topic settings of
    both topics, e.g. {"min.insync.replicas": "2"} on a replicated cluster (the staging
    topic keeps its own retention.ms and cleanup.policy). Existing topics are not altered.
    """

    topic: str
    key_column: str
    staging_topic: str = ""
    partitions: int = 3
    replication_factor: int | None = None
    topic_config: dict[str, str] = field(default_factory=dict)
    # Staged records must outlive the slowest commit and recovery's deadline.
    staging_retention_ms: int = 7 * 24 * 3600 * 1000
    # The commit copy runs in one transaction; the broker's transaction.max.timeout.ms caps this.
    transaction_timeout_ms: int = 15 * 60 * 1000
    # Headers added to every record of the load (a replacement load says what it replaces).
    headers: dict[str, str] = field(default_factory=dict)
    connection: str = ""   # which cluster ('' = the default one); topics of one cluster share one copy
    frame: str = ""        # which of the job's DataFrames it loads ('' = the job's main one)
    # The columns of the frame each record's JSON value holds (empty: all of them).
    value_columns: tuple[str, ...] = ()
    # The declared columns of its frame ({column: Spark type}, twophase.schema): the frame
    # must match it, and the values hold its columns in its order.
    frame_schema: dict[str, str] = field(default_factory=dict)
    kind = "kafka"

    def __post_init__(self):
        check_names(self)
        object.__setattr__(self, "frame_schema",
                           check_schema(self.frame_schema, f"kafka topic {self.topic}") if self.frame_schema else {})
        object.__setattr__(self, "value_columns", tuple(self.value_columns) or tuple(self.frame_schema))
        check_topic(self.topic)
        if not self.staging_topic:
            object.__setattr__(self, "staging_topic", f"{self.topic}{STAGING_SUFFIX}")
            if len(self.staging_topic) > TOPIC_MAX_LENGTH:
                raise SpecError(f"kafka topic {self.topic[:40]}... is {len(self.topic)} characters long: its staging "
                                f"topic (the name plus {STAGING_SUFFIX!r}) would exceed Kafka's limit of "
                                f"{TOPIC_MAX_LENGTH}; shorten the topic name to at most "
                                f"{TOPIC_MAX_LENGTH - len(STAGING_SUFFIX)} characters or set staging_topic")
        check_topic(self.staging_topic, "kafka staging topic")
        if self.topic == self.staging_topic:
            raise SpecError("the staging topic must differ from the target topic")
        if not isinstance(self.key_column, str) or not IDENT.match(self.key_column):
            raise SpecError(f"kafka key_column {self.key_column!r} must be a plain identifier (letters, digits, '_'; "
                            "not starting with a digit): the name of a column of the job's output")
        reserved = [h for h in self.headers if h == "load_id" or h in ("twophase.part", "twophase.attempt")]
        if reserved:
            raise SpecError(f"kafka headers {reserved} are reserved for the protocol")
        for name in ("partitions", "replication_factor"):
            value = getattr(self, name)
            if value is None and name == "replication_factor":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"kafka {name} must be a whole number of at least 1, got {value!r}"
                                + (" (or None: the broker's default)" if name == "replication_factor" else ""))
        if not isinstance(self.topic_config, dict):
            raise SpecError(f"kafka topic_config must be a dict of Kafka topic settings, got {self.topic_config!r}")
        for key, value in self.topic_config.items():
            if not isinstance(key, str) or not _CONFIG_KEY.match(key):
                raise SpecError(f"kafka topic_config key {key!r} is not a Kafka topic setting name "
                                "(like 'min.insync.replicas')")
            if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
                raise SpecError(f"kafka topic_config {key} must be a string or a whole number, got {value!r}")
        object.__setattr__(self, "topic_config", {k: str(v) for k, v in self.topic_config.items()})

    def staging_config(self) -> dict[str, str]:
        """The staging topic's settings: the target's, but its records stay until the commit
        copies them (retention.ms) and are never compacted away (cleanup.policy delete)."""
        return {**self.topic_config, "retention.ms": str(self.staging_retention_ms), "cleanup.policy": "delete"}


    @property
    def name(self) -> str:
        return self.topic

    @property
    def mode(self) -> str:
        return "append"  # a topic is a log: a replacement load's records say what they replace

    def for_replacement(self, replaces: list[str]) -> "KafkaTarget":
        """Records of a load that replaces its interval carry `twophase.mode: replace` and
        `twophase.replaces: <load ids>`, so consumers can drop what it replaces."""
        return replace(self, headers={**self.headers, "twophase.mode": "replace",
                                      "twophase.replaces": ",".join(replaces)})


def check_topic(name, what: str = "kafka topic") -> None:
    """Raise SpecError unless Kafka accepts `name` as a topic name."""
    if not isinstance(name, str) or not name:
        raise SpecError(f"{what} must be a non-empty name, got {name!r}")
    if not _TOPIC.match(name):
        raise SpecError(f"{what} {name!r} has characters Kafka refuses in topic names: "
                        "use only letters, digits, '.', '_' and '-'")
    if name in (".", ".."):
        raise SpecError(f"{what} {name!r} is a name Kafka refuses ('.' and '..' are not topic names): choose another")
    if len(name) > TOPIC_MAX_LENGTH:
        raise SpecError(f"{what} {name[:40]}... is {len(name)} characters long; Kafka allows at most "
                        f"{TOPIC_MAX_LENGTH}: choose a shorter name")
