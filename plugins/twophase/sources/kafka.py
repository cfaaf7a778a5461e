"""A Kafka topic as a source: each load reads an offset range per partition, from where the
last committed load of the source ended to the partitions' last stable offsets.

- The end is the last stable offset (list_offsets with read_committed), never the high
  watermark: records of a transaction still open are not read by this load, and the next
  load starts before them.
- The first load starts at `start`: "earliest" (the oldest record kept) or an ISO
  timestamp (the first offset at or after it). A partition added since the last committed
  load is read from offset 0.
- `cap` (0: none) bounds a load to that many offsets in all, shared between partitions in
  proportion to what each has to read, so a backlog drains over several loads.
- Loud, never silent, on what cannot be exactly once (SourceError, the load fails before
  anything is read): offsets that retention deleted before any load read them (naming
  partitions and offsets); the topic deleted or re-created (its topic id differs from the committed
  loads'); a partition that went away.
- A range's offsets include transaction markers and aborted records: `records` is the
  number of offsets, an upper bound of the records read (0 means none).

The key is the cluster (the connection's name, '' for the default), the topic and the
reading `group`: two pipelines that read one topic name their own groups, and each has its
own continuity. The group is also the consumer group the consumed offsets are mirrored to
for Kafka's own tools (lag, kafka-consumer-groups.sh); the log's committed ranges are the
truth.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from ..errors import SpecError
from .contract import Range, Source, SourceError, SourceReader

START_EARLIEST = "earliest"


@dataclass(frozen=True)
class KafkaSource(Source):
    topic: str
    group: str
    start: str = START_EARLIEST
    cap: int = 0
    connection: str = ""
    kind = "kafka"
    unit = "offset(s)"

    def __post_init__(self):
        if not self.topic or not isinstance(self.topic, str):
            raise SourceError(f"Kafka source: topic must be a topic name, got {self.topic!r}")
        if not self.group or not isinstance(self.group, str):
            raise SourceError(f"Kafka source {self.topic}: group must name who reads it (e.g. the pipeline), "
                              f"got {self.group!r}")
        if self.start != START_EARLIEST:
            try:
                datetime.fromisoformat(self.start)
            except (TypeError, ValueError):
                raise SourceError(f"Kafka source {self.topic}: start must be 'earliest' or an ISO timestamp "
                                  f"with a time zone, got {self.start!r}") from None
        if not isinstance(self.cap, int) or isinstance(self.cap, bool) or self.cap < 0:
            raise SourceError(f"Kafka source {self.topic}: cap must be a whole number >= 0, got {self.cap!r}")

    @property
    def key(self) -> str:
        return f"kafka:{self.connection or 'default'}/{self.topic}#{self.group}"

    def open(self, conns) -> "KafkaReader":
        if conns is None:
            raise SourceError(f"{self.key}: reading it needs the servers (begin(log, spec, conns))")
        return KafkaReader(self, self.server(conns))

    def server(self, conns) -> str:
        return conns.address("kafka", self.connection)

    def describe(self, fixed: Range) -> str:
        spans = sorted(((int(p), span) for p, span in fixed.position["partitions"].items()))
        return (f"{self.key}: {fixed.records} {self.unit}, "
                + ", ".join(f"partition {p} {a}..{b}" for p, (a, b) in spans)
                + (f" ({fixed.note})" if fixed.note else ""))

    def offsets(self, fixed: Range) -> list:
        """The next offset to read of each partition after `fixed` (confluent_kafka
        TopicPartitions): what its group commits."""
        from confluent_kafka import TopicPartition

        return [TopicPartition(self.topic, p, end)
                for p, end in sorted((int(p), end) for p, (_, end) in fixed.position["partitions"].items())]

    def frame(self, spark, fixed: Range, conns):
        """The range's records with Spark's Kafka batch source (spark-sql-kafka: the stack's
        Spark connection carries it in spark.jars): explicit starting and ending offsets
        per partition, read_committed, failOnDataLoss on (offsets deleted meanwhile fail
        the job). Columns: key, value, topic, partition, offset, timestamp, headers..."""
        if conns is None:
            raise SpecError(f"{self.key}: reading it needs the job's servers: read_source is for a job's build, "
                            "inside twophase.spark.job.run")
        spans = fixed.position["partitions"]
        topic = fixed.position["topic"]
        return (spark.read.format("kafka")
                .option("kafka.bootstrap.servers", conns.address("kafka", self.connection))
                .option("assign", json.dumps({topic: [int(p) for p in spans]}))
                .option("startingOffsets", json.dumps({topic: {p: a for p, (a, _) in spans.items()}}))
                .option("endingOffsets", json.dumps({topic: {p: b for p, (_, b) in spans.items()}}))
                .option("kafka.isolation.level", "read_committed")
                .option("failOnDataLoss", "true")
                .option("includeHeaders", "true")
                .load())


@dataclass(frozen=True)
class Topic:
    """What the brokers say of the topic now, per partition: the oldest offset kept and the
    last stable offset."""

    topic_id: str
    earliest: dict[int, int]
    stable: dict[int, int]


class KafkaReader(SourceReader):
    def __init__(self, source: KafkaSource, bootstrap: str):
        self.source, self.bootstrap = source, bootstrap

    def topic(self) -> Topic:
        from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicCollection, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        from ..participants.kafka.client import patiently, kafka_client, request_timeout_s

        timeout = request_timeout_s()
        with kafka_client(AdminClient, self.bootstrap) as admin:
            try:
                described = patiently(lambda: admin.describe_topics(
                    TopicCollection([self.source.topic]), request_timeout=timeout)[self.source.topic].result())
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise SourceError(f"{self.source.key}: the topic does not exist") from None
                raise
            partitions = [p.id for p in described.partitions]

            def offsets(spec, **kw) -> dict[int, int]:
                asked = {TopicPartition(self.source.topic, p): spec for p in partitions}
                done = patiently(lambda: {tp.partition: f.result().offset
                                           for tp, f in admin.list_offsets(asked, request_timeout=timeout,
                                                                           **kw).items()})
                return done

            return Topic(str(described.topic_id), offsets(OffsetSpec.earliest()),
                         offsets(OffsetSpec.latest(), isolation_level=IsolationLevel.READ_COMMITTED))

    def _starts(self, committed: list[Range], now: Topic) -> tuple[dict[int, int], list[str]]:
        """Where each partition's next range starts, and notes on it."""
        notes = []
        if committed:
            last = committed[-1].position
            if last["topic_id"] != now.topic_id:
                raise SourceError(f"{self.source.key}: the topic was deleted and created again (topic id "
                                  f"{last['topic_id']} then, {now.topic_id} now): its offsets start over, and "
                                  "reading them as a continuation would lose or repeat records. Start a new source "
                                  "(another group) to read the new topic")
            ends = {int(p): end for p, (_, end) in last["partitions"].items()}
            gone = sorted(set(ends) - set(now.stable))
            if gone:
                raise SourceError(f"{self.source.key}: partition(s) {gone} went away")
            added = sorted(set(now.stable) - set(ends))
            if added:
                notes.append(f"partition(s) {added} added: read from offset 0")
            return {p: ends.get(p, 0) for p in now.stable}, notes
        if self.source.start == START_EARLIEST:
            return dict(now.earliest), notes
        return self._at_time(now), [f"first load: from {self.source.start}"]

    def _at_time(self, now: Topic) -> dict[int, int]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        from ..participants.kafka.client import patiently, kafka_client, request_timeout_s

        millis = int(datetime.fromisoformat(self.source.start).timestamp() * 1000)
        with kafka_client(AdminClient, self.bootstrap) as admin:
            asked = {TopicPartition(self.source.topic, p): OffsetSpec.for_timestamp(millis) for p in now.stable}
            found = patiently(lambda: {tp.partition: f.result().offset for tp, f in admin.list_offsets(
                asked, request_timeout=request_timeout_s()).items()})
        # -1: no record at or after that time: start at the end (nothing to read yet).
        return {p: (off if off >= 0 else now.stable[p]) for p, off in found.items()}

    def fix(self, committed: list[Range]) -> Range:
        now = self.topic()
        starts, notes = self._starts(committed, now)
        deleted = {p: (start, now.earliest[p]) for p, start in starts.items() if start < now.earliest[p]}
        if deleted:
            raise SourceError(f"{self.source.key}: retention deleted offsets no load read: " + ", ".join(
                f"partition {p} offsets {a}..{b - 1}" for p, (a, b) in sorted(deleted.items()))
                + ": nothing is loaded, as loading past them would lose those records without a word. To go on "
                f"without them: python -m twophase skip-deleted '{self.source.key}' --reason '<why>'")
        ends = dict(now.stable)
        todo = {p: max(0, ends[p] - starts[p]) for p in ends}
        total = sum(todo.values())
        if self.source.cap and total > self.source.cap:
            ends = _capped(starts, todo, self.source.cap)
            notes.append(f"capped at {self.source.cap} offsets: {total - self.source.cap} left for the next load")
        partitions = {str(p): [starts[p], max(starts[p], ends[p])] for p in sorted(ends)}
        records = sum(end - start for start, end in partitions.values())
        return Range(self.source.key, self.source.kind,
                     {"topic": self.source.topic, "topic_id": now.topic_id, "partitions": partitions},
                     records, "; ".join(notes), behind=total - records)

    def deleted(self, committed: list[Range]) -> Range | None:
        now = self.topic()
        starts, _ = self._starts(committed, now)
        if all(start >= now.earliest[p] for p, start in starts.items()):
            return None
        partitions = {str(p): [start, max(start, now.earliest[p])] for p, start in sorted(starts.items())}
        return Range(self.source.key, self.source.kind,
                     {"topic": self.source.topic, "topic_id": now.topic_id, "partitions": partitions},
                     sum(end - start for start, end in partitions.values()), "deleted by retention before any load "
                     "read them")

    def follows(self, committed: list[Range], fixed: Range) -> list[str]:
        problems = []
        parts = {int(p): span for p, span in fixed.position["partitions"].items()}
        if not committed:
            return [f"{self.source.key}: partition {p} ends before it starts ({a}..{b})"
                    for p, (a, b) in sorted(parts.items()) if b < a]
        last = committed[-1].position
        if last["topic_id"] != fixed.position["topic_id"]:
            problems.append(f"{self.source.key}: another topic id than the committed loads'")
        ends = {int(p): end for p, (_, end) in last["partitions"].items()}
        for p, end in sorted(ends.items()):
            if p not in parts:
                problems.append(f"{self.source.key}: partition {p} is not read (a gap from offset {end})")
            elif parts[p][0] > end:
                problems.append(f"{self.source.key}: partition {p} offsets {end}..{parts[p][0] - 1} would never be "
                                "read (a gap)")
            elif parts[p][0] < end:
                problems.append(f"{self.source.key}: partition {p} offsets {parts[p][0]}..{end - 1} were read by a "
                                "committed load (an overlap)")
        for p, (a, _) in sorted(parts.items()):
            if p not in ends and a != 0:
                problems.append(f"{self.source.key}: partition {p} is new and must be read from offset 0, not {a}")
        return problems

    def changed(self, fixed: Range) -> list[str]:
        now = self.topic()
        if now.topic_id != fixed.position["topic_id"]:
            return [f"{self.source.key}: the topic was deleted and created again while the load read it"]
        problems = []
        for p, (start, end) in sorted((int(p), span) for p, span in fixed.position["partitions"].items()):
            if p not in now.earliest:
                problems.append(f"{self.source.key}: partition {p} went away")
            elif start < end and now.earliest[p] > start:
                problems.append(f"{self.source.key}: partition {p} offsets {start}..{min(now.earliest[p], end) - 1} "
                                "were deleted by retention while the load read them")
        return problems

    def mirror(self, fixed: Range) -> None:
        """The group's offsets at the range's end, committed plainly (a load with a Kafka
        target on this cluster commits them in its copy transaction instead:
        KafkaParticipant.carry_source)."""
        from ..participants.kafka.client import group_consumer, patiently

        offsets = self.source.offsets(fixed)
        with group_consumer(self.bootstrap, self.source.group) as consumer:
            patiently(lambda: consumer.commit(offsets=offsets, asynchronous=False))

    def lag(self, committed: list[Range]) -> int | None:
        now = self.topic()
        starts, _ = self._starts(committed, now) if committed else (dict(now.earliest), [])
        return sum(max(0, now.stable[p] - starts.get(p, 0)) for p in now.stable)


def _capped(starts: dict[int, int], todo: dict[int, int], cap: int) -> dict[int, int]:
    """Each partition's end when `cap` offsets are shared in proportion to what each has to
    read (the remainder to the partitions with most left, lowest number first)."""
    total = sum(todo.values())
    share = {p: todo[p] * cap // total for p in todo}
    left = cap - sum(share.values())
    for p in sorted(todo, key=lambda p: (-(todo[p] - share[p]), p)):
        if left == 0:
            break
        if share[p] < todo[p]:
            share[p] += 1
            left -= 1
    return {p: starts[p] + share[p] for p in todo}
