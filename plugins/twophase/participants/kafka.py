"""The Kafka participant: stage to a staging topic, commit by one transactional copy.

- begin (driver): create the staging and target topics when missing, with explicit settings.
- stage (executors, PartitionProducer): an idempotent producer (acks=all) writes the
  partition's records to the staging topic, each with headers `load_id`,
  `twophase.part` (Spark partition) and `twophase.attempt` (a token per task attempt).
  The target topic is not touched, so its read_committed consumers never stall.
- pre-commit (driver): keep only the attempts Spark reported as successful; the vote
  records per staging partition the offset range [first, last] and count, and a checksum.
- commit: copy exactly those records (this load, winning attempts, inside the ranges) to
  the target topic in ONE transaction that also commits the copy's consumer offsets, so
  readers see the whole load at once and a crashed copy restarts exactly once: after a
  crash, init_transactions() fences and aborts the old attempt, and committed offsets
  tell a retry that the copy already happened.
- abort: never touches the target topic; fences any copy still open for the load.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
import zlib
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from .. import failpoints, ids
from ..errors import KafkaUnreachable, ServerUnreachable, kafka_unreachable, one_line
from ..outcome import Kind, Outcome
from ..participant import Participant, PartitionWriter, Staging
from ..spec import KafkaTarget, SpecError
from ..votes import Vote

NAME = "kafka"
_log = logging.getLogger("twophase.kafka")
H_LOAD, H_PART, H_ATTEMPT = "load_id", "twophase.part", "twophase.attempt"
_ABORTED = "twophase:aborted"  # metadata of the copy group's offsets once the load is aborted here
_FENCE_TIMEOUT_MS = 60_000  # transaction.timeout.ms of abort's fencing producer (below any broker's limit)
# Same partitioner as Java clients, so keys land where Java producers would put them.
# The local queue holds up to 500,000 records or 64 MiB: Python hands records over in
# Arrow batches faster than the broker acknowledges them, and with librdkafka's default
# (100,000) the producer spent a third of its time waiting on a full queue. The byte cap
# keeps a worker's memory bounded whatever the load's size.
_PRODUCER_BASE = {"partitioner": "murmur2_random", "compression.type": "lz4", "linger.ms": 20,
                  "batch.size": 1 << 20, "queue.buffering.max.messages": 500_000,
                  "queue.buffering.max.kbytes": 1 << 16}
# The copy's consumer: librdkafka pauses fetching a partition for fetch.queue.backoff.ms
# (default 1 s) whenever its local queue is past queued.min.messages; the copy drains
# that queue in well under a second, so the default left it idle most of the time
# (1M records: 8.7 s at the default, 4.9 s at 10 ms). Memory stays bounded by
# queued.max.messages.kbytes (64 MiB).
_COPY_CONSUMER = {"fetch.queue.backoff.ms": 10}


# The broker's default max.message.bytes (a topic's limit unless set on the topic).
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
# What a record adds to its key, value and headers on the wire, at most: the record batch's
# header (61 bytes) and the record's own varints (length, attributes, timestamp and offset
# deltas, key and value lengths, header count: 36 bytes), rounded up.
_RECORD_OVERHEAD = 100


class ConnectionLog:
    """The `logger` of every Kafka client the project creates (see kafka_config).

    Without one, librdkafka prints each failed connection attempt to stderr, one line every
    reconnect backoff (from 50-100 ms): hundreds of lines per outage in a task's log. This
    logger says it once per outage: the first failure as a warning, repeats counted, and
    one line when the outage ends (when the client is closed: after it worked again, or
    after the step gave up), with its duration and count. Other librdkafka lines are passed
    on to the `twophase.kafka` logger at their level.

    confluent_kafka (2.16) calls `logger.log(level, "%s [%s] %s", facility, client name,
    message)`, and only from poll()/flush()/consume() of the client: lines logged while the
    client is blocked in another call (list_topics, init_transactions...) queue up until
    then, so the duration is measured from the client's start (or the last outage's end).
    """

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.quiet = False  # draining at the end: count only, the summary follows at once
        self._reset()

    def _reset(self) -> None:
        self.failures = 0
        self.first_failure = self.last_failure = ""
        self.since = time.monotonic()

    def log(self, level: int, fmt: str, *args) -> None:
        facility, client, message = args if len(args) == 3 else ("", "", fmt % args)
        message = _plain(message)
        if facility != "FAIL":  # librdkafka's facility for a broker connection that failed
            _log.log(level, "Kafka client %s: %s %s", client, facility, message)
            return
        if not self.failures and not self.quiet:
            _log.warning("Kafka at %s: %s (further connection failures are counted, not logged, until the "
                         "client closes)", self.bootstrap, message)
        self.failures += 1
        self.first_failure = self.first_failure or message
        self.last_failure = message

    def end(self, how: str) -> None:
        """The client closes: one line for an outage it saw; `how` it ended."""
        if self.failures:
            _log.warning("Kafka at %s: %d failed connection attempts in %.1f s, %s; first: %s", self.bootstrap,
                         self.failures, time.monotonic() - self.since, how, one_line(self.first_failure, 200))
        self._reset()


def _plain(message: str) -> str:
    """A librdkafka log line without its thread, broker and state decorations:
    "[thrd:127.0.0.1:59092/bootstrap]: 127.0.0.1:59092/bootstrap: Connect to ipv4#127.0.0.1:59092
    failed: Connection refused (after 0ms in state CONNECT)" -> "Connect to ... refused"."""
    message = message.split("]: ", 1)[-1]
    message = re.sub(r"^\S+/(bootstrap|\d+): ", "", message)
    return re.sub(r" \(after \d+ms in state \w+[^)]*\)$", "", message)


def kafka_config(bootstrap: str, **settings) -> dict:
    """The configuration of every Kafka client the project creates: the servers, the
    client's own `settings` (names with dots: pass them as **{"acks": "all"}), and a fresh
    ConnectionLog as its `logger`."""
    return {**settings, "bootstrap.servers": bootstrap, "logger": ConnectionLog(bootstrap)}


def _drain(client, log: ConnectionLog) -> None:
    """Hand the client's queued log lines to its ConnectionLog (they arrive only on poll)."""
    log.quiet = True
    try:
        client.poll(0)  # a Consumer here is never mid-copy: a record polled now is not used
    except (RuntimeError, KafkaException):  # a closed consumer
        pass
    finally:
        log.quiet = False


@contextmanager
def kafka_client(kind, bootstrap: str, **settings):
    """A Producer, Consumer or AdminClient (`kind`) configured by kafka_config. On exit
    its connection log is summarized and a Consumer is closed. A KafkaException that means
    no broker answered leaves as KafkaUnreachable: one line naming the servers and what
    the client saw ("Connect to ipv4#127.0.0.1:59092 failed: Connection refused")."""
    conf = kafka_config(bootstrap, **settings)
    log, client = conf["logger"], kind(conf)
    how = "then it answered"
    try:
        with _answering(bootstrap, client, log):
            yield client
    except BaseException:
        how = "given up"
        raise
    finally:
        _drain(client, log)
        if isinstance(client, Consumer):
            client.close()
        log.end(how)


def _produce(producer: Producer, topic: str, value, key, headers, on_delivery=None) -> None:
    """produce(), waiting for deliveries to drain while the local queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, headers=headers, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.1)


def _connected(client):
    """The producer or consumer, once connected to a broker: a metadata request makes the
    connection. Without it, librdkafka waits out a backoff when the first request finds no
    broker up: an idempotent or transactional producer asks for its producer id again after
    500 ms (about every other staging task and commit paid that), and the copy's consumer,
    after committed(), fetched its first records only after ~1 s."""
    client.list_topics(timeout=30)
    return client


# Errors that clear within seconds: a young or busy broker's while __consumer_offsets or
# the transaction log is loading or moving, and a new topic's until its partitions have
# their leader.
_PASSING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT,
            KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}


def _patiently(call, patience_s: float = 60.0, also: frozenset = frozenset()):
    """call(), retried with backoff while Kafka answers with a passing error (or one of `also`)."""
    deadline, pause = time.monotonic() + patience_s, 0.2
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = exc.args[0]
            passing = err.code() in _PASSING or err.code() in also or err.retriable()
            if not passing or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


def record_checksum(key: bytes | None, value: bytes | None) -> int:
    """CRC-32 of key then value; spark_stage computes the same in Spark (crc32 of concat)."""
    return zlib.crc32(value or b"", zlib.crc32(key or b""))


def public_headers(load_id: str, headers: dict[str, str]) -> list[tuple[str, bytes]]:
    """The headers of every record the load publishes: load_id, then the target's own."""
    return [(H_LOAD, load_id.encode()), *((k, v.encode()) for k, v in sorted(headers.items()))]


def ensure_topics(bootstrap: str, target: KafkaTarget) -> dict[str, int]:
    """Create the target and staging topics when missing; idempotent. Returns each topic's
    max.message.bytes (the largest record batch its broker accepts)."""
    with kafka_client(AdminClient, bootstrap) as admin:
        _create_missing(admin, target)
        # A topic created a moment ago can be unknown to the broker answering for a moment.
        return _patiently(lambda: _max_message_bytes(admin, [target.topic, target.staging_topic]),
                          also=frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART}))


def _max_message_bytes(admin: AdminClient, topics: list[str]) -> dict[str, int]:
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics],
                                     request_timeout=30)
    return {resource.name: int(future.result(60)["max.message.bytes"].value) for resource, future in futures.items()}


def _create_missing(admin: AdminClient, target: KafkaTarget) -> None:
    existing = admin.list_topics(timeout=30).topics
    wanted = [
        NewTopic(target.topic, target.partitions, target.replication_factor),
        NewTopic(target.staging_topic, target.partitions, target.replication_factor, config={
            "retention.ms": str(target.staging_retention_ms), "cleanup.policy": "delete"}),
    ]
    missing = [t for t in wanted if t.topic not in existing]
    if not missing:
        return
    for topic, future in admin.create_topics(missing, operation_timeout=30).items():
        try:
            future.result(60)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # created concurrently
                raise


class RecordTooLarge(ValueError):
    """A record is larger than a topic of the load accepts (max.message.bytes)."""


def _size_settings(max_message_bytes: int | None) -> dict:
    """Producer settings for records up to the topics' limit: librdkafka refuses a record
    above its own message.max.bytes (default 1,000,000, below the broker's default
    1,048,588) before the broker sees it; and a batch must stay under the topic's limit."""
    if max_message_bytes is None:
        return {}
    return {"message.max.bytes": max(1_000_000, max_message_bytes + 1024),
            "batch.size": min(1 << 20, max_message_bytes)}


@contextmanager
def _answering(bootstrap: str, client, log: ConnectionLog):
    """The one place a Kafka client's error that means no broker answered becomes
    KafkaUnreachable (one line, naming what the client saw); other errors pass unchanged."""
    try:
        yield
    except KafkaException as exc:
        _drain(client, log)
        down = kafka_unreachable(bootstrap, exc, log.first_failure)
        if down is None:
            raise
        raise down from None


class KafkaWriter(PartitionWriter):
    """Executor side: stage one Spark partition's records of one topic. Picklable (plain
    fields only). Each batch's records come ready from the staging pass: key, value and
    their summed checksum in the columns `key`, `value`, `crc` (KafkaParticipant.stage
    has Spark compute them).

    Librdkafka reports only failed deliveries (delivery.report.only.error): a Python
    callback per record took a quarter of the staging workers' time. Which offsets the
    load's records got comes from the staging topic's watermarks (KafkaParticipant).

    `max_message_bytes`: the smallest max.message.bytes of the load's topics (read by
    KafkaParticipant.begin; `limited_by` names that topic). A record whose key, value,
    headers and framing exceed it is refused with RecordTooLarge naming its size and key,
    before librdkafka or the broker refuse it with "Message size too large". Sizes are
    checked uncompressed: the broker checks compressed batches, but a record must fit
    whatever its neighbours compress to."""

    def __init__(self, bootstrap: str, staging_topic: str, load_id: str, headers: dict[str, str],
                 max_message_bytes: int | None = None, limited_by: str = "",
                 columns: tuple[str, str, str] = ("key", "value", "crc")):
        self.bootstrap, self.staging_topic, self.load_id = bootstrap, staging_topic, load_id
        self.headers = headers
        self.max_message_bytes, self.limited_by = max_message_bytes, limited_by or staging_topic
        self.columns = columns

    def write(self, batch) -> None:
        key, value, crc = self.columns
        self.produce(batch.column(key).to_pylist(), batch.column(value).to_pylist(), pc.sum(batch.column(crc)).as_py())

    def close(self) -> dict:
        return {"records": self.flush(), "checksum": self.checksum}

    def discard(self) -> None:
        try:
            self._producer.purge()
            self._producer.flush(0)
            self._log.end("given up")
        except Exception:  # noqa: BLE001 - discarding a failed attempt must not hide its error
            pass

    def open(self, part: int, attempt: str) -> None:
        self.errors: list[str] = []
        self.part = part
        # The promoted record's headers with the internal ones after load_id, in this
        # order: the commit copy reads the first three by position (_StagedFilter).
        load, *extra = public_headers(self.load_id, self.headers)
        self._headers = [load, (H_PART, str(part).encode()), (H_ATTEMPT, attempt.encode()), *extra]
        self._room = None  # the most key + value bytes a record may have
        if self.max_message_bytes is not None:
            framing = _RECORD_OVERHEAD + sum(len(k) + len(v) + 10 for k, v in self._headers)
            self._room = self.max_message_bytes - framing
        conf = kafka_config(self.bootstrap, **{
            **_PRODUCER_BASE, **_size_settings(self.max_message_bytes), "enable.idempotence": True, "acks": "all",
            "delivery.report.only.error": True, "on_delivery": self._failed})
        self._log = conf["logger"]
        self._producer = Producer(conf)
        try:
            with _answering(self.bootstrap, self._producer, self._log):
                _connected(self._producer)
        except BaseException:
            self._log.end("given up")
            raise
        self.checksum = 0
        self.records = 0

    def _failed(self, err, msg) -> None:
        self.errors.append(str(err))

    def produce(self, keys: list, values: list, checksum: int | None) -> None:
        """Queue one batch of records (bytes or str); `checksum`: the sum of the batch's
        record_checksum values, computed by the caller (Spark, see KafkaParticipant.stage)."""
        # The largest value plus the largest key bounds every record: one pass in C per batch.
        if self._room is not None and (max(map(len, filter(None, values)), default=0)
                                       + max(map(len, filter(None, keys)), default=0)) > self._room:
            self._refuse_too_large(keys, values)
        producer, topic, headers = self._producer, self.staging_topic, self._headers
        send = producer.produce
        for key, value in zip(keys, values):
            try:
                send(topic, value, key, headers=headers)
            except BufferError:
                _produce(producer, topic, value, key, headers)
        producer.poll(0)
        self.checksum = (self.checksum + (checksum or 0)) % (1 << 64)
        self.records += len(keys)

    def _refuse_too_large(self, keys: list, values: list) -> None:
        for key, value in zip(keys, values):
            size = len(_as_bytes(key)) + len(_as_bytes(value))
            if size > self._room:
                shown = _as_bytes(key).decode("utf-8", "backslashreplace") if key is not None else None
                raise RecordTooLarge(
                    f"record of {size:,} bytes (key and value) for key {one_line(repr(shown), 80)} exceeds the "
                    f"max.message.bytes {self.max_message_bytes:,} of topic {self.limited_by} (headers and framing "
                    f"take {self.max_message_bytes - self._room:,} of it): make the record smaller in the job, or "
                    "raise max.message.bytes of the target and staging topics (and the broker's message.max.bytes)")

    def flush(self) -> int:
        """Wait for every record; the number staged. Raises if any was not acknowledged
        by all replicas (every record gets exactly one report, and only failures report)."""
        remaining = self._producer.flush(300)
        log = self._log
        saw = log.first_failure
        log.end("staging ended" if not (remaining or self.errors) else "given up")
        if remaining or self.errors:
            problem = (f"{remaining} of {self.records} records of Spark partition {self.part} not acknowledged, "
                       f"errors: {'; '.join(self.errors[:3]) or 'none reported'}")
            if saw:
                raise KafkaUnreachable(one_line(f"Kafka at {self.bootstrap} is unreachable: {saw}: {problem}"))
            raise RuntimeError(one_line(f"Kafka staging failed: {problem}"))
        return self.records


def _quoted(column: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + column.replace("`", "``") + "`"


def _as_bytes(value) -> bytes:
    if value is None:
        return b""
    return value.encode() if isinstance(value, str) else value


class KafkaParticipant(Participant):
    """The load's topics on one Kafka cluster: one copy transaction covers them all."""

    kind = NAME
    # The copy can fail for good after a yes vote (staged records expired, topic deleted):
    # it commits before the participants that cannot (docs/adr/0001-commit-order.md).
    commit_may_fail = True
    append_only = True

    def __init__(self, bootstrap: str, targets, load_id: str, name: str = NAME):
        self.bootstrap = self.endpoint = bootstrap
        self.load_id, self.name = load_id, name
        self.topics: list[KafkaTarget] = [targets] if isinstance(targets, KafkaTarget) else list(targets)
        self.targets = tuple(t.topic for t in self.topics)
        self.copy_id = ids.copy_transactional_id(load_id)
        # One transaction for every topic: the longest timeout any of them asks for.
        self.transaction_timeout_ms = max(t.transaction_timeout_ms for t in self.topics)

    def stage(self, frames) -> Staging:
        """Create the topics; note where each staging topic ends, before anything is staged.
        A writer refuses records larger than any topic of the load accepts. Spark computes
        each record: the key column as text, the value as a JSON object of the frame's
        columns (or the target's value_columns), and their checksum (record_checksum)."""
        for target in self.topics:
            if target.frame not in frames:
                raise SpecError(f"topic {target.topic} loads the job's frame {target.frame!r}, which the job did "
                                f"not return (it returned {sorted(frames)})")
            columns = frames[target.frame]
            missing = [c for c in [target.key_column, *target.value_columns] if c not in columns]
            if missing:
                raise SpecError(f"the DataFrame lacks columns the targets need: {missing} (of topic "
                                f"{target.topic}); it has {columns}")
        limits = {}
        for target in self.topics:
            limits.update(ensure_topics(self.bootstrap, target))
        limited_by = min(limits, key=lambda topic: (limits[topic], topic))
        max_message_bytes = limits[limited_by]
        marks = {"staged_from": {t.staging_topic: self._ends(t.staging_topic) for t in self.topics},
                 "max_message_bytes": max_message_bytes}
        writers, expressions = {}, {}
        for target in self.topics:
            names = tuple(f"_twophase_{part}_{ids.digest(target.topic, 8)}" for part in ("key", "value", "crc"))
            key = f"cast(cast({_quoted(target.key_column)} as string) as binary)"
            value_columns = target.value_columns or frames[target.frame]
            value = f"cast(to_json(struct({', '.join(map(_quoted, value_columns))})) as binary)"
            expressions[target.topic] = dict(zip(names, (key, value, f"crc32(concat(coalesce({key}, X''), {value}))")))
            writers[target.topic] = KafkaWriter(self.bootstrap, target.staging_topic, self.load_id, target.headers,
                                                max_message_bytes, limited_by, names)
        return Staging(writers, marks, {t.topic: t.frame for t in self.topics}, expressions)

    def _ends(self, topic: str) -> dict[int, int]:
        """Staging partition -> its high watermark (the next offset to be written)."""
        with kafka_client(Consumer, self.bootstrap, **{"group.id": self.copy_id, "enable.auto.commit": False}) as consumer:
            def ends():
                metadata = consumer.list_topics(topic, timeout=30).topics[topic]
                if metadata.error is not None or not metadata.partitions:  # a new topic, not yet everywhere
                    raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE, f"{topic}: {metadata.error}"))
                return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                        for p in metadata.partitions}
            return _patiently(ends)

    # -- prepare ------------------------------------------------------------------------
    def prepare(self, marks: dict, reports, expected) -> Vote:
        """Vote on what the successful task attempts staged (`reports`, per topic: one per
        Spark partition with its part, attempt, records and checksum).

        Their records lie, per staging partition, between where the topic ended at stage
        and where it ends now (every attempt flushed with acks=all before reporting), next
        to any records of failed attempts or of other loads staging at the same time,
        which the copy skips by their headers."""
        copies, problems, counts = [], [], {}
        for target in self.topics:
            results = reports.get(target.topic, [])
            ends = self._ends(target.staging_topic)
            staged_from = {int(p): first for p, first in marks["staged_from"][target.staging_topic].items()}
            ranges = {p: [first, ends[p] - 1] for p, first in staged_from.items() if ends.get(p, first) > first}
            records = counts[target.topic] = sum(r["records"] for r in results)
            copies.append({"topic": target.topic, "staging_topic": target.staging_topic,
                           "ranges": {str(p): r for p, r in sorted(ranges.items())},
                           "attempts": {str(r["part"]): r["attempt"] for r in results},
                           "checksum": sum(r["checksum"] for r in results) % (1 << 64), "records": records})
            span = sum(last - first + 1 for first, last in ranges.values())
            if records != expected.get(target.topic):
                problems.append(f"staged {records} records for {target.topic} but Spark produced "
                                f"{expected.get(target.topic)}")
            elif span < records:
                problems.append(f"staged {records} records but the staging topic {target.staging_topic} grew by "
                                f"only {span} (partitions added or records deleted?)")
        committable = {"topics": copies, "max_message_bytes": marks["max_message_bytes"]}
        problem = "; ".join(problems) or self.check_ranges(committable)
        summary = "; ".join(f"{c['records']} records staged for {c['topic']} in {c['staging_topic']} offsets "
                            + (", ".join(f"[{p}] {r[0]}..{r[1]}" for p, r in c["ranges"].items()) or "none")
                            for c in copies)
        return Vote(self.name, not problem, sum(counts.values()), committable, problem, counts, summary)

    def check(self, vote: Vote) -> str:
        return self.check_ranges(vote.committable, vote.count)

    def check_ranges(self, committable: dict, count: int = 0) -> str:
        """'' if every staged range is still in its staging topic, else what is missing."""
        with kafka_client(Consumer, self.bootstrap, **{"group.id": self.copy_id, "enable.auto.commit": False}) as consumer:
            for copy in _copies(committable, count):
                for partition, (first, last) in copy["ranges"].items():
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(copy["staging_topic"], int(partition)), timeout=30)
                    if low > first or high <= last:
                        return (f"staged records of {copy['staging_topic']}[{partition}] offsets {first}..{last} "
                                f"are no longer all there (topic now holds {low}..{high - 1}): "
                                "retention or an operator removed them")
        return ""

    # -- commit ---------------------------------------------------------------------------
    def commit(self, vote: Vote) -> Outcome:
        """Copy the load's staged records to their target topics in one transaction.

        Handles: copied now (DONE); copied by an earlier attempt (offsets committed:
        ALREADY_DONE); a crashed earlier attempt (fenced and aborted by
        init_transactions, then redone); staged records gone, a target topic gone, counts
        or checksums differ, or the copy outran its transaction timeout (FAILED, the open
        transaction aborted so nothing is visible); broker trouble (RETRY_LATER).
        """
        producer_settings = {**_PRODUCER_BASE, **_size_settings(vote.committable.get("max_message_bytes")),
                             "transactional.id": self.copy_id, "enable.idempotence": True, "acks": "all",
                             "transaction.timeout.ms": self.transaction_timeout_ms}
        consumer_settings = {"group.id": self.copy_id, "enable.auto.commit": False,
                             "isolation.level": "read_committed", "auto.offset.reset": "error", **_COPY_CONSUMER}
        try:
            with kafka_client(Producer, self.bootstrap, **producer_settings) as producer, \
                    kafka_client(Consumer, self.bootstrap, **consumer_settings) as consumer:
                return self._commit(vote, _connected(producer), _connected(consumer))
        except ServerUnreachable as exc:
            return Outcome(self.name, Kind.RETRY_LATER, str(exc))

    def _commit(self, vote: Vote, producer: Producer, consumer: Consumer) -> Outcome:
        copies = _copies(vote.committable, vote.count)
        timeout_s = self.transaction_timeout_ms / 1000
        topics = ", ".join(c["topic"] for c in copies)
        in_transaction = False
        try:
            try:
                producer.init_transactions(60)  # fences and aborts a crashed earlier copy
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
                    return Outcome(self.name, Kind.FAILED, (
                        f"the commit copy's transaction.timeout.ms ({self.transaction_timeout_ms} ms) is above "
                        "the broker's transaction.max.timeout.ms; nothing was copied. Lower "
                        "KafkaTarget.transaction_timeout_ms, or raise the broker's transaction.max.timeout.ms."))
                raise
            if self._copy_committed(consumer, copies):
                return Outcome(self.name, Kind.ALREADY_DONE, counts={"records": vote.count})
            if self._aborted(consumer, copies):
                return Outcome(self.name, Kind.FAILED, f"the load was aborted: its staged records are never "
                               f"published to {topics}")
            if not any(c["ranges"] for c in copies):
                return Outcome(self.name, Kind.DONE, counts={"records": 0, "topic": topics})
            problem = self._target_missing() or self.check_ranges(vote.committable, vote.count)
            if problem:
                return Outcome(self.name, Kind.FAILED, problem)
            producer.begin_transaction()
            in_transaction = True
            copied = self._copy(producer, consumer, copies, vote.count, time.monotonic() + timeout_s * 0.9)
            wrong = [f"{c['topic']}: copy found {copied[c['staging_topic']][0]} records (checksum "
                     f"{copied[c['staging_topic']][1]}) of this load in staging, but the vote staged {c['records']} "
                     f"(checksum {c['checksum']})" for c in copies
                     if copied[c["staging_topic"]] != (c["records"], c["checksum"])]
            if wrong:
                producer.abort_transaction(60)
                in_transaction = False
                return Outcome(self.name, Kind.FAILED, "; ".join(wrong))
            offsets = [TopicPartition(c["staging_topic"], int(p), r[1] + 1) for c in copies for p, r in c["ranges"].items()]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(timeout_s)
            in_transaction = False
            failpoints.hit("kafka.copy_committed")
            return Outcome(self.name, Kind.DONE, counts={"records": sum(n for n, _ in copied.values()), "topic": topics})
        except _CopyTimedOut as exc:
            producer.abort_transaction(60)
            in_transaction = False
            return Outcome(self.name, Kind.FAILED, self._timeout_advice(f"was too short: {exc}"))
        except KafkaException as exc:
            err = exc.args[0]
            if in_transaction and err.txn_requires_abort():
                try:
                    producer.abort_transaction(60)
                except KafkaException:
                    pass
            # The broker aborted the transaction because it outlived its timeout: for good.
            # A client-side _TIMED_OUT (retriable) leaves the outcome unknown: retry, and the
            # next attempt learns from the committed offsets whether the copy went through.
            expired = (not err.retriable() and err.code() != KafkaError._TIMED_OUT
                       and "timed out" in err.str().lower() and "transaction" in err.str().lower())
            if expired:
                return Outcome(self.name, Kind.FAILED, self._timeout_advice(f"expired: {err.str()}"))
            down = kafka_unreachable(self.bootstrap, exc)
            return Outcome(self.name, Kind.RETRY_LATER,
                           str(down) if down else one_line(f"Kafka at {self.bootstrap}: {err.str()}"))

    def _copy(self, producer, consumer, copies: list[dict], expected: int, deadline) -> dict[str, tuple[int, int]]:
        """Copy every staged range to its target topic; {staging topic: (records, checksum)}."""
        by_staging = {t.staging_topic: t for t in self.topics}
        filters = {c["staging_topic"]: _StagedFilter(self.load_id, c["attempts"],
                                                     {int(p): r for p, r in c["ranges"].items()}, c["records"])
                   for c in copies}
        headers = {s: public_headers(self.load_id, t.headers) for s, t in by_staging.items()}
        target_of = {c["staging_topic"]: c["topic"] for c in copies}
        consumer.assign([TopicPartition(c["staging_topic"], int(p), r[0]) for c in copies for p, r in c["ranges"].items()])
        last = {(c["staging_topic"], int(p)): r[1] for c in copies for p, r in c["ranges"].items()}
        counts = {c["staging_topic"]: [0, 0] for c in copies}
        copied = 0
        half = (expected + 1) // 2
        send = producer.produce
        while last:
            if time.monotonic() > deadline:
                raise _CopyTimedOut(f"copied {copied} of {expected} records before the deadline")
            # A short timeout: the last partial batch must not wait a whole second.
            for msg in consumer.consume(num_messages=10000, timeout=0.1):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                staging, p, offset = msg.topic(), msg.partition(), msg.offset()
                end = last.get((staging, p))
                if end is None:
                    continue
                if offset >= end:
                    del last[(staging, p)]
                    consumer.pause([TopicPartition(staging, p)])
                    if offset > end:
                        continue
                ours = filters[staging]
                if not ours.dense and not ours.promotes(msg.headers()):
                    continue  # another load's record, or one of a failed task attempt
                key, value = msg.key(), msg.value()
                tally = counts[staging]
                tally[0] += 1
                tally[1] += record_checksum(key, value)
                try:
                    send(target_of[staging], value, key, headers=headers[staging])
                except BufferError:
                    _produce(producer, target_of[staging], value, key, headers[staging])
                copied += 1
                if copied == half:
                    producer.flush(60)
                    failpoints.hit("kafka.copy_middle")
            producer.poll(0)
        producer.flush(300)
        # The last batch can cross the deadline too: committing then would race the broker's
        # abort of the timed-out transaction, so it fails here like any other overrun.
        if time.monotonic() > deadline:
            raise _CopyTimedOut(f"copied all {copied} records, but only after the deadline")
        return {s: (n, checksum % (1 << 64)) for s, (n, checksum) in counts.items()}

    def _target_missing(self) -> str:
        with kafka_client(AdminClient, self.bootstrap) as admin:
            topics = admin.list_topics(timeout=30).topics
        missing = [t.topic for t in self.topics if t.topic not in topics]
        if missing:
            return f"target topic {', '.join(missing)} does not exist (deleted after the vote?)"
        return ""

    def _copy_committed(self, consumer, copies: list[dict]) -> bool:
        """True if this load's copy transaction committed (its offsets are committed)."""
        wanted = {(c["staging_topic"], int(p)): r[1] + 1 for c in copies for p, r in c["ranges"].items()}
        if not wanted:
            return False
        committed = _patiently(lambda: consumer.committed([TopicPartition(t, p) for t, p in wanted], timeout=30))
        done = [tp.offset >= wanted[(tp.topic, tp.partition)] for tp in committed]
        if any(done) and not all(done):
            raise RuntimeError(f"copy offsets of {self.copy_id} are partly committed: {committed}")
        return all(done)

    def _aborted(self, consumer, copies: list[dict]) -> bool:
        """True if an abort marked this load's copy group (_mark_aborted)."""
        wanted = [TopicPartition(c["staging_topic"], int(p)) for c in copies for p in c["ranges"]]
        if not wanted:
            return False
        return any(tp.metadata == _ABORTED for tp in _patiently(lambda: consumer.committed(wanted, timeout=30)))

    def _mark_aborted(self, consumer, copies: list[dict]) -> None:
        """Make the abort durable where a later commit looks: the copy group's offsets at the
        start of each staged range, with metadata `twophase:aborted` (the copy, had it
        committed, would have moved them past the range, atomically with its records)."""
        marks = [TopicPartition(c["staging_topic"], int(p), r[0], metadata=_ABORTED)
                 for c in copies for p, r in c["ranges"].items()]
        if marks:
            _patiently(lambda: consumer.commit(offsets=marks, asynchronous=False))

    def _timeout_advice(self, what: str) -> str:
        return (f"the commit copy's transaction.timeout.ms ({self.transaction_timeout_ms} ms) {what}; "
                "the copy was aborted, nothing is visible. Raise KafkaTarget.transaction_timeout_ms and the "
                "broker's transaction.max.timeout.ms above the time the copy needs.")

    # -- abort ------------------------------------------------------------------------------
    def abort(self, vote: Vote | None = None) -> Outcome:
        """Discard: the target topics are never touched. Fences any copy transaction of this
        load still open (crashed commit attempt), refuses (FAILED) if the copy had already
        committed, and marks the copy group aborted, so a later commit of the vote refuses
        too. Staged records stay in the staging topics, never promoted, until their
        retention deletes them."""
        # Fencing opens no transaction, so its timeout only has to be one the broker accepts:
        # a load whose transaction_timeout_ms is above the broker's limit must still roll back.
        fence = {"transactional.id": self.copy_id,
                 "transaction.timeout.ms": min(self.transaction_timeout_ms, _FENCE_TIMEOUT_MS)}
        try:
            with kafka_client(Producer, self.bootstrap, **fence) as producer:
                _connected(producer).init_transactions(60)
                copies = _copies(vote.committable, vote.count) if vote else []
                with kafka_client(Consumer, self.bootstrap, **{"group.id": self.copy_id,
                                                               "enable.auto.commit": False}) as consumer:
                    if self._copy_committed(consumer, copies):
                        return Outcome(self.name, Kind.FAILED, f"the copy to {', '.join(self.targets)} already "
                                       "committed; Kafka cannot un-publish it")
                    self._mark_aborted(consumer, copies)
        except ServerUnreachable as exc:
            return Outcome(self.name, Kind.RETRY_LATER, str(exc))
        except KafkaException as exc:  # answered, but not now (a coordinator moving...)
            return Outcome(self.name, Kind.RETRY_LATER, one_line(f"Kafka at {self.bootstrap}: {exc.args[0].str()}"))
        counts = {"staged_records_discarded": vote.count if vote else 0, "copy_fenced": self.copy_id}
        return Outcome(self.name, Kind.DONE, counts=counts)

    def unreachable(self, exc: BaseException) -> ServerUnreachable | None:
        return kafka_unreachable(self.bootstrap, exc)

    # -- readers ----------------------------------------------------------------------------
    def visible(self, load_ids: list[str]) -> dict[str, dict[str, int]]:
        """Records of each load in each target topic, read as a read_committed consumer
        (header load_id): what consumers see now."""
        counts = {topic: count_topic_by_load(self.bootstrap, topic) for topic in self.targets}
        return {lid: {topic: counts[topic].get(lid, 0) for topic in self.targets} for lid in load_ids}


def _copies(committable: dict, count: int) -> list[dict]:
    """The committable's copies, one per topic; a vote logged before a participant had
    several topics holds one, with the vote's count as its records."""
    if "topics" in committable:
        return committable["topics"]
    return [{key: committable[key] for key in ("topic", "staging_topic", "ranges", "attempts", "checksum")}
            | {"records": count}]


def count_topic_by_load(bootstrap: str, topic: str) -> Counter:
    """Records per header load_id in the whole topic, read as read_committed."""
    counts: Counter = Counter()
    for msg in iter_topic(bootstrap, topic):
        load_id = dict(msg.headers() or []).get(H_LOAD)
        counts[load_id.decode() if load_id else None] += 1
    return counts


def iter_topic(bootstrap: str, topic: str, isolation: str = "read_committed") -> Iterator:
    """Every record of the topic visible at this isolation level, up to its end now."""
    with kafka_client(AdminClient, bootstrap) as admin:
        metadata = admin.list_topics(timeout=30)
    if topic not in metadata.topics:
        return
    with kafka_client(Consumer, bootstrap, **{"group.id": f"twophase-verify-{uuid.uuid4().hex}",
                                              "isolation.level": isolation, "enable.auto.commit": False}) as consumer:
        ends = {}
        for p in metadata.topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        idle = 0
        while ends and idle < 10:
            msgs = consumer.consume(num_messages=10000, timeout=1.0)
            idle = 0 if msgs else idle + 1
            for msg in msgs:
                if msg.error():
                    raise RuntimeError(f"reading {topic}: {msg.error()}")
                yield msg
            # read_committed stops short of aborted records and transaction markers:
            # a partition is read to its end when the position reaches the end offset.
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    ends.pop(tp.partition)


class _CopyTimedOut(Exception):
    pass


class _StagedFilter:
    """Which staged records the copy promotes: this load's, from the winning attempt of
    their Spark partition.

    When the staged ranges are dense (their offsets add up to the load's record count),
    every record in them is a winner's, so the copy need not read headers: reading them
    cost a third of the copy. Otherwise (failed attempts, or another load staging to the
    same topic at the same time) records are filtered one by one. The count and checksum
    checked after the copy cover both ways.
    """

    def __init__(self, load_id: str, attempts: dict[str, str], ranges: dict[int, list[int]], records: int):
        self.dense = sum(last - first + 1 for first, last in ranges.values()) == records
        self._load = (H_LOAD, load_id.encode())
        # (twophase.part header) -> (twophase.attempt header) of the winning attempt
        self._winners = {(H_PART, part.encode()): (H_ATTEMPT, attempt.encode()) for part, attempt in attempts.items()}

    def promotes(self, headers: list | None) -> bool:
        """PartitionProducer writes load_id, twophase.part, twophase.attempt first, in that
        order; read by position, a record costs three tuple comparisons, not a dict."""
        return (bool(headers) and len(headers) >= 3 and headers[0] == self._load
                and self._winners.get(headers[1]) == headers[2])
