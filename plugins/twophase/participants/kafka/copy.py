"""The commit copy: a load's staged records to its target topics in one transaction that
also commits the copy group's offsets, so the offsets tell a retry (or an abort) whether
the copy happened; an abort marks them so a later commit refuses."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition

from ... import failpoints
from .client import _produce, group_consumer, patiently, request_timeout_s

_log = logging.getLogger("twophase.kafka.copy")
PROGRESS_EVERY_S = 30  # a long copy says how far it got
STALLED_AFTER_S = 10   # no record copied for this long: say what it waits on
from .writer import H_ATTEMPT, H_LOAD, H_PART, public_headers, record_checksum

_ABORTED = "twophase:aborted"  # metadata of the copy group's offsets once the load is aborted here
# The copy's consumer: librdkafka pauses fetching a partition for fetch.queue.backoff.ms
# (default 1 s) whenever its local queue is past queued.min.messages; the copy drains
# that queue in well under a second, so the default left it idle most of the time
# (1M records: 8.7 s at the default, 4.9 s at 10 ms). Memory stays bounded by
# queued.max.messages.kbytes (64 MiB).
_COPY_CONSUMER = {"fetch.queue.backoff.ms": 10}


def _copies(committable: dict, count: int) -> list[dict]:
    """The committable's copies, one per topic; a vote logged before a participant had
    several topics holds one, with the vote's count as its records."""
    if "topics" in committable:
        return committable["topics"]
    return [{key: committable[key] for key in ("topic", "staging_topic", "ranges", "attempts", "checksum")}
            | {"records": count}]


class _CopyTimedOut(Exception):
    pass


class _Progress:
    """Logs a long copy's progress, and plainly what it waits on when it stalls (a staging
    or target partition without a leader: a broker down on a replicated cluster)."""

    def __init__(self, consumer, topics: list[str], expected: int):
        self.consumer, self.topics, self.expected = consumer, topics, expected
        self.started = self.moved = self.reported = self.warned = time.monotonic()
        self.copied = 0

    def tick(self, copied: int, pending: list[tuple[str, int]]) -> None:
        now = time.monotonic()
        if copied != self.copied:
            self.copied, self.moved = copied, now
        if now - self.reported >= PROGRESS_EVERY_S:
            self.reported = now
            _log.info("commit copy: %d of %d records copied in %.0f s; %d staging partitions to go",
                      copied, self.expected, now - self.started, len(pending))
        if now - self.moved >= STALLED_AFTER_S and now - self.warned >= STALLED_AFTER_S:
            self.warned = now
            _log.warning("commit copy: no record copied for %.0f s (%d of %d so far); %s", now - self.moved, copied,
                         self.expected, self.waiting_on(pending))

    def waiting_on(self, pending: list[tuple[str, int]]) -> str:
        try:
            leaderless = [f"{name}[{p}]" for name in self.topics
                          for p, meta in self.consumer.list_topics(name, timeout=5).topics[name].partitions.items()
                          if meta.leader < 0]
        except KafkaException as exc:
            return f"the cluster does not answer its metadata request ({exc.args[0].str()})"
        if leaderless:
            return (f"waiting on partitions without a leader: {', '.join(leaderless)} (a broker down? the copy goes "
                    "on when a replica takes over, within the transaction's timeout)")
        return "waiting on " + ", ".join(f"{t}[{p}]" for t, p in pending[:10]) + (" ..." if len(pending) > 10 else "")


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
        """KafkaWriter writes load_id, twophase.part, twophase.attempt first, in that
        order; read by position, a record costs three tuple comparisons, not a dict."""
        return (bool(headers) and len(headers) >= 3 and headers[0] == self._load
                and self._winners.get(headers[1]) == headers[2])


def _copy(producer, consumer, load_id: str, topics, copies: list[dict], expected: int,
          deadline: float, progress: _Progress) -> dict[str, tuple[int, int]]:
    """Copy every staged range to its target topic; {staging topic: (records, checksum)}."""
    by_staging = {t.staging_topic: t for t in topics}
    filters = {c["staging_topic"]: _StagedFilter(load_id, c["attempts"],
                                                 {int(p): r for p, r in c["ranges"].items()}, c["records"])
               for c in copies}
    headers = {s: public_headers(load_id, t.headers) for s, t in by_staging.items()}
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
        progress.tick(copied, list(last))
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
                producer.flush(2 * request_timeout_s())
                failpoints.hit("kafka.copy_middle")
        producer.poll(0)
    producer.flush(300)
    # The last batch can cross the deadline too: committing then would race the broker's
    # abort of the timed-out transaction, so it fails here like any other overrun.
    if time.monotonic() > deadline:
        raise _CopyTimedOut(f"copied all {copied} records, but only after the deadline")
    return {s: (n, checksum % (1 << 64)) for s, (n, checksum) in counts.items()}


def progress_of(consumer, copies: list[dict], expected: int) -> _Progress:
    """The progress report of a copy: its staging topics, then its target topics."""
    staging = [c["staging_topic"] for c in copies]
    return _Progress(consumer, [*staging, *dict.fromkeys(c["topic"] for c in copies)], expected)


@dataclass(frozen=True)
class CopyJob:
    """What a copy transaction copies: the load's staged ranges (_copies) to its topics."""

    load_id: str
    topics: list  # the participant's KafkaTargets
    copies: list[dict]
    expected: int  # records, all copies together


class PythonCopy:
    """The copy transaction in this process: librdkafka's transactional producer, one
    Python call per record (_copy). The steps are jvm_copy.JvmCopy's."""

    def __init__(self, job: CopyJob, producer, consumer, bootstrap: str, group: str):
        """`consumer`: of the copy's `group`, whose offsets the transaction commits."""
        self.job, self.producer, self.consumer, self.bootstrap, self.group = job, producer, consumer, bootstrap, group

    def start(self, timeout_s: float) -> None:
        """Fence and abort an earlier attempt's open transaction."""
        self.producer.init_transactions(timeout_s)

    def copy(self, progress: _Progress, deadline: float) -> dict[str, tuple[int, int]]:
        self.producer.begin_transaction()
        job = self.job
        return _copy(self.producer, self.consumer, job.load_id, job.topics, job.copies, job.expected, deadline,
                     progress)

    def abort(self, timeout_s: float) -> None:
        self.producer.abort_transaction(timeout_s)

    def commit(self, offsets: list[tuple[str, list]], timeout_s: float) -> None:
        """Put each group's offsets (group id, TopicPartitions) in the transaction, commit it."""
        for group, tps in offsets:
            if group == self.group:
                self.producer.send_offsets_to_transaction(tps, self.consumer.consumer_group_metadata(), 60)
                continue
            with group_consumer(self.bootstrap, group) as other:
                self.producer.send_offsets_to_transaction(tps, other.consumer_group_metadata(), 60)
        self.producer.commit_transaction(timeout_s)


def _copy_committed(consumer, copies: list[dict], copy_id: str) -> bool:
    """True if this load's copy transaction committed (its offsets are committed)."""
    wanted = {(c["staging_topic"], int(p)): r[1] + 1 for c in copies for p, r in c["ranges"].items()}
    if not wanted:
        return False
    committed = patiently(lambda: consumer.committed([TopicPartition(t, p) for t, p in wanted], timeout=request_timeout_s()))
    done = [tp.offset >= wanted[(tp.topic, tp.partition)] for tp in committed]
    if any(done) and not all(done):
        raise RuntimeError(f"copy offsets of {copy_id} are partly committed: {committed}")
    return all(done)


def _aborted(consumer, copies: list[dict]) -> bool:
    """True if an abort marked this load's copy group (_mark_aborted)."""
    wanted = [TopicPartition(c["staging_topic"], int(p)) for c in copies for p in c["ranges"]]
    if not wanted:
        return False
    return any(tp.metadata == _ABORTED for tp in patiently(lambda: consumer.committed(wanted, timeout=request_timeout_s())))


def _mark_aborted(consumer, copies: list[dict]) -> None:
    """Make the abort durable where a later commit looks: the copy group's offsets at the
    start of each staged range, with metadata `twophase:aborted` (the copy, had it
    committed, would have moved them past the range, atomically with its records)."""
    marks = [TopicPartition(c["staging_topic"], int(p), r[0], metadata=_ABORTED)
             for c in copies for p, r in c["ranges"].items()]
    if marks:
        patiently(lambda: consumer.commit(offsets=marks, asynchronous=False))
