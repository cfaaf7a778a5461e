"""KafkaParticipant: the driver side (stage, prepare, commit, abort); the package's
docstring tells the protocol."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ... import failpoints, ids
from ...errors import ServerUnreachable, SpecError, one_line
from ...protocol.outcome import Kind, Outcome
from ...protocol.votes import Vote
from ...server_errors import kafka_unreachable
from ..contract import Participant, Staging
from .budget import over_budget
from .client import (_PRODUCER_BASE, _connected, patiently, _size_settings, ensure_topics, kafka_client, request_timeout_s, topic_setting)
from . import jvm_copy
from .copy import (_COPY_CONSUMER, CopyJob, PythonCopy, _aborted, _copies, _copy_committed, _CopyTimedOut, _mark_aborted,
                   progress_of)
from .reader import count_topic_by_load
from .target import KafkaTarget
from .writer import KafkaWriter

NAME = "kafka"
_log = logging.getLogger("twophase.kafka.copy")
_FENCE_TIMEOUT_MS = 60_000  # transaction.timeout.ms of abort's fencing producer (below any broker's limit)


def _quoted(column: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + column.replace("`", "``") + "`"


def expired(err: KafkaError, outlived: bool) -> bool:
    """Whether an error of the commit copy means the broker aborted its transaction for
    outliving its timeout, which is for good (the same copy would time out again): the
    broker says so, or, once the transaction outlived its timeout (`outlived`), the producer
    failed fatally (the broker's abort bumps the producer's epoch, so a produce request in
    flight fails as fenced). A client-side _TIMED_OUT (retriable) leaves the outcome
    unknown: retry, and the next attempt learns from the committed offsets whether the copy
    went through."""
    said = (not err.retriable() and err.code() != KafkaError._TIMED_OUT
            and "timed out" in err.str().lower() and "transaction" in err.str().lower())
    return said or (outlived and err.fatal())


class KafkaParticipant(Participant):
    """The load's topics on one Kafka cluster: one copy transaction covers them all."""

    kind = NAME
    executor_packages = ("confluent_kafka", "pyarrow")  # what writer.py imports on executors (spark/executors.py)
    # The copy can fail for good after a yes vote (staged records expired, topic deleted):
    # it commits before the participants that cannot (docs/adr/0001-commit-order.md).
    commit_may_fail = True
    # A long copy can outrun its transaction's timeout with no one at fault: the likeliest
    # may-fail commit, so it goes first of all.
    commit_risk = 2
    append_only = True

    def __init__(self, bootstrap: str, targets, load_id: str, name: str = NAME, attempt: int = 1):
        self.bootstrap = self.endpoint = bootstrap
        # Attempts need no names of their own here: every attempt stages into the same
        # staging topics, and the copy takes only the records of the Spark task attempts
        # the load's vote names (headers), so a superseded attempt's are never copied.
        self.load_id, self.name, self.attempt = load_id, name, attempt
        self.topics: list[KafkaTarget] = [targets] if isinstance(targets, KafkaTarget) else list(targets)
        self.targets = tuple(t.topic for t in self.topics)
        self.copy_id = ids.copy_transactional_id(load_id)
        # One transaction for every topic: the longest timeout any of them asks for.
        self.transaction_timeout_ms = max(t.transaction_timeout_ms for t in self.topics)
        self.carried = None  # (a Kafka source, its Range): carry_source

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
            # With a declared schema every value holds all of its columns, nulls as null.
            nulls = ", map('ignoreNullFields', 'false')" if target.frame_schema else ""
            value = f"cast(to_json(struct({', '.join(map(_quoted, value_columns))}){nulls}) as binary)"
            expressions[target.topic] = dict(zip(names, (key, value, f"crc32(concat(coalesce({key}, X''), {value}))")))
            partitions = len(marks["staged_from"][target.staging_topic])
            writers[target.topic] = KafkaWriter(self.bootstrap, target.staging_topic, self.load_id, target.headers,
                                                max_message_bytes, limited_by, names, tuple(value_columns),
                                                bool(target.frame_schema), partitions)
        return Staging(writers, marks, {t.topic: t.frame for t in self.topics}, expressions)

    def _ends(self, topic: str) -> dict[int, int]:
        """Staging partition -> its high watermark (the next offset to be written)."""
        with kafka_client(Consumer, self.bootstrap, **{"group.id": self.copy_id, "enable.auto.commit": False}) as consumer:
            def ends():
                metadata = consumer.list_topics(topic, timeout=request_timeout_s()).topics[topic]
                if metadata.error is not None or not metadata.partitions:  # a new topic, not yet everywhere
                    raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE, f"{topic}: {metadata.error}"))
                return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=request_timeout_s())[1]
                        for p in metadata.partitions}
            return patiently(ends)

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

    def budget(self, vote: Vote, earlier: list[dict], staged_since: datetime) -> str:
        """The copy must fit in its transaction's timeout at the pace of the pipeline's
        earlier copies, and the staged records must outlive it (budget.py)."""
        retention = topic_setting(self.bootstrap, [t.staging_topic for t in self.topics], "retention.ms")
        return over_budget(vote.count, earlier, self.transaction_timeout_ms, retention, staged_since,
                           datetime.now(timezone.utc))

    def ready(self, vote: Vote) -> Vote:
        """Nothing to take before the commit (the copy's transaction opens in commit): check
        every staged range is still in its staging topic."""
        problem = self.check_ranges(vote.committable, vote.count)
        return vote.no(problem) if problem else vote

    def staged_rows(self, vote: Vote, target: str):
        """The topic's staged records' JSON values, as rows (a value leaves out its nulls)."""
        from ...audit.staged import ArrowRows
        from .staged import staged_values

        [copy] = [c for c in _copies(vote.committable, vote.count) if c["topic"] == target]
        return ArrowRows.of_records(target, staged_values(self.bootstrap, f"{self.copy_id}-audit", self.load_id, copy))

    def check_ranges(self, committable: dict, count: int = 0) -> str:
        """'' if every staged range is still in its staging topic, else what is missing."""
        with kafka_client(Consumer, self.bootstrap, **{"group.id": self.copy_id, "enable.auto.commit": False}) as consumer:
            for copy in _copies(committable, count):
                for partition, (first, last) in copy["ranges"].items():
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(copy["staging_topic"], int(partition)), timeout=request_timeout_s())
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
        job = CopyJob(self.load_id, self.topics, _copies(vote.committable, vote.count), vote.count)
        try:
            try:
                argv = jvm_copy.command(vote.count)
                if argv:
                    _log.info("commit copy: %d records, in a JVM", vote.count)
                    with jvm_copy.JvmCopy(job, argv, self.bootstrap, self.copy_id, self.transaction_timeout_ms,
                                          vote.committable.get("max_message_bytes")) as txn, \
                            kafka_client(Consumer, self.bootstrap, **consumer_settings) as consumer:
                        return self._commit(vote, txn, _connected(consumer))
            except jvm_copy.JvmUnavailable as exc:
                _log.warning("commit copy: %s; copying in Python instead", exc)
            with kafka_client(Producer, self.bootstrap, **producer_settings) as producer, \
                    kafka_client(Consumer, self.bootstrap, **consumer_settings) as consumer:
                txn = PythonCopy(job, _connected(producer), _connected(consumer), self.bootstrap, self.copy_id)
                return self._commit(vote, txn, consumer)
        except ServerUnreachable as exc:
            return Outcome(self.name, Kind.RETRY_LATER, str(exc))

    def carry_source(self, source, fixed, address: str) -> bool:
        """A Kafka source on this cluster: its group's offsets at the range's end go into the
        copy transaction, committed atomically with the load's records (plainly, when the
        load copies no record)."""
        if source.kind != "kafka" or address != self.bootstrap:
            return False
        self.carried = (source, fixed)
        return True

    def _source_offsets(self) -> list[tuple[str, list]]:
        """The carried source's group and its offsets, for the copy transaction."""
        if self.carried is None:
            return []
        source, fixed = self.carried
        return [(source.group, source.offsets(fixed))]

    def _mirror_source_offsets(self) -> None:
        """The carried source's offsets committed plainly (the load copies no record)."""
        if self.carried is not None:
            from ...sources.kafka import KafkaReader

            source, fixed = self.carried
            KafkaReader(source, self.bootstrap).mirror(fixed)

    def _commit(self, vote: Vote, txn, consumer: Consumer) -> Outcome:
        """The copy transaction's steps, in this process or in a JVM (`txn`: copy.PythonCopy
        or jvm_copy.JvmCopy)."""
        copies = txn.job.copies
        timeout_s = self.transaction_timeout_ms / 1000
        topics = ", ".join(c["topic"] for c in copies)
        in_transaction, began = False, None
        try:
            try:
                txn.start(2 * request_timeout_s())
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
                    return Outcome(self.name, Kind.FAILED, (
                        f"the commit copy's transaction.timeout.ms ({self.transaction_timeout_ms} ms) is above "
                        "the broker's transaction.max.timeout.ms; nothing was copied. Lower "
                        "KafkaTarget.transaction_timeout_ms, or raise the broker's transaction.max.timeout.ms."))
                raise
            if _copy_committed(consumer, copies, self.copy_id):
                # The copy's transaction committed the staging offsets with the records, and
                # it commits only when it copied each topic's voted records.
                return Outcome(self.name, Kind.ALREADY_DONE, counts={"records": vote.count},
                               visible={c["topic"]: c["records"] for c in copies})
            if _aborted(consumer, copies):
                return Outcome(self.name, Kind.FAILED, f"the load was aborted: its staged records are never "
                               f"published to {topics}")
            if not any(c["ranges"] for c in copies):
                self._mirror_source_offsets()
                return Outcome(self.name, Kind.DONE, counts={"records": 0, "topic": topics},
                               visible={c["topic"]: 0 for c in copies})
            problem = self._target_missing() or self.check_ranges(vote.committable, vote.count)
            if problem:
                return Outcome(self.name, Kind.FAILED, problem)
            in_transaction, began = True, time.monotonic()
            copied = txn.copy(progress_of(consumer, copies, vote.count), began + timeout_s * 0.9)
            wrong = [f"{c['topic']}: copy found {copied[c['staging_topic']][0]} records (checksum "
                     f"{copied[c['staging_topic']][1]}) of this load in staging, but the vote staged {c['records']} "
                     f"(checksum {c['checksum']})" for c in copies
                     if copied[c["staging_topic"]] != (c["records"], c["checksum"])]
            if wrong:
                txn.abort(2 * request_timeout_s())
                in_transaction = False
                return Outcome(self.name, Kind.FAILED, "; ".join(wrong))
            offsets = [TopicPartition(c["staging_topic"], int(p), r[1] + 1) for c in copies for p, r in c["ranges"].items()]
            txn.commit([(self.copy_id, offsets), *self._source_offsets()], timeout_s)
            in_transaction = False
            failpoints.hit("kafka.copy_committed")
            return Outcome(self.name, Kind.DONE, counts={"records": sum(n for n, _ in copied.values()), "topic": topics},
                           visible={c["topic"]: copied[c["staging_topic"]][0] for c in copies})
        except _CopyTimedOut as exc:
            txn.abort(2 * request_timeout_s())
            in_transaction = False
            return Outcome(self.name, Kind.FAILED, self._timeout_advice(f"was too short: {exc}"))
        except KafkaException as exc:
            err = exc.args[0]
            if in_transaction and err.txn_requires_abort():
                try:
                    txn.abort(2 * request_timeout_s())
                except KafkaException:
                    pass
            outlived = began is not None and time.monotonic() - began >= timeout_s
            if expired(err, outlived):
                return Outcome(self.name, Kind.FAILED, self._timeout_advice(f"expired: {err.str()}"))
            down = kafka_unreachable(self.bootstrap, exc)
            return Outcome(self.name, Kind.RETRY_LATER,
                           str(down) if down else one_line(f"Kafka at {self.bootstrap}: {err.str()}"))

    def _target_missing(self) -> str:
        with kafka_client(AdminClient, self.bootstrap) as admin:
            topics = admin.list_topics(timeout=request_timeout_s()).topics
        missing = [t.topic for t in self.topics if t.topic not in topics]
        if missing:
            return f"target topic {', '.join(missing)} does not exist (deleted after the vote?)"
        return ""

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
                _connected(producer).init_transactions(2 * request_timeout_s())
                copies = _copies(vote.committable, vote.count) if vote else []
                with kafka_client(Consumer, self.bootstrap, **{"group.id": self.copy_id,
                                                               "enable.auto.commit": False}) as consumer:
                    if _copy_committed(consumer, copies, self.copy_id):
                        return Outcome(self.name, Kind.FAILED, f"the copy to {', '.join(self.targets)} already "
                                       "committed; Kafka cannot un-publish it")
                    _mark_aborted(consumer, copies)
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
