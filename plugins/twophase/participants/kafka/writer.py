"""The executor side: KafkaWriter produces one Spark partition's records to a staging
topic; and the record format every side shares (headers, checksum)."""

from __future__ import annotations

import zlib

import pyarrow.compute as pc
from confluent_kafka import Producer

from ...errors import KafkaUnreachable, one_line
from ..contract import NotInJvm, PartitionWriter, jvm_type
from .client import (_PRODUCER_BASE, _answering, _connected, _produce, _size_settings, java_producer_settings,
                     kafka_config)

H_LOAD, H_PART, H_ATTEMPT = "load_id", "twophase.part", "twophase.attempt"
# What a record adds to its key, value and headers on the wire, at most: the record batch's
# header (61 bytes) and the record's own varints (length, attributes, timestamp and offset
# deltas, key and value lengths, header count: 36 bytes), rounded up.
_RECORD_OVERHEAD = 100
# The least buffer pool of a JVM staging producer (KafkaWriter._java_producer).
STAGING_BUFFER_FLOOR = 16 << 20
# The most records a JVM staging producer has unacknowledged (StagingRecords.java says why).
STAGING_MAX_IN_FLIGHT = 65_536


def record_checksum(key: bytes | None, value: bytes | None) -> int:
    """CRC-32 of key then value; spark_stage computes the same in Spark (crc32 of concat)."""
    return zlib.crc32(value or b"", zlib.crc32(key or b""))


def public_headers(load_id: str, headers: dict[str, str]) -> list[tuple[str, bytes]]:
    """The headers of every record the load publishes: load_id, then the target's own."""
    return [(H_LOAD, load_id.encode()), *((k, v.encode()) for k, v in sorted(headers.items()))]


class RecordTooLarge(ValueError):
    """A record is larger than a topic of the load accepts (max.message.bytes)."""


class KafkaWriter(PartitionWriter):
    """Executor side: stage one Spark partition's records of one topic. Picklable (plain
    fields only). Each batch's records come ready from the staging pass: key, value and
    their summed checksum in the columns `key`, `value`, `crc` (KafkaParticipant.stage
    has Spark compute them). The value is the JSON object of the frame's columns
    `value_of` (to_json; nulls as null when `keep_nulls`, else as the session says).

    Librdkafka reports only failed deliveries (delivery.report.only.error): a Python
    callback per record took a quarter of the staging workers' time. Which offsets the
    load's records got comes from the staging topic's watermarks (KafkaParticipant).

    `max_message_bytes`: the smallest max.message.bytes of the load's topics (read by
    KafkaParticipant.begin; `limited_by` names that topic). A record whose key, value,
    headers and framing exceed it is refused with RecordTooLarge naming its size and key,
    before librdkafka or the broker refuse it with "Message size too large". Sizes are
    checked uncompressed: the broker checks compressed batches, but a record must fit
    whatever its neighbours compress to.

    `partitions`: the staging topic's, which size the JVM producer's buffer pool."""

    def __init__(self, bootstrap: str, staging_topic: str, load_id: str, headers: dict[str, str],
                 max_message_bytes: int | None = None, limited_by: str = "",
                 columns: tuple[str, str, str] = ("key", "value", "crc"), value_of: tuple[str, ...] = (),
                 keep_nulls: bool = False, partitions: int = 1):
        self.bootstrap, self.staging_topic, self.load_id = bootstrap, staging_topic, load_id
        self.headers = headers
        self.max_message_bytes, self.limited_by = max_message_bytes, limited_by or staging_topic
        self.columns, self.value_of, self.keep_nulls = columns, value_of, keep_nulls
        self.partitions = partitions

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

    def jvm_spec(self, fields: list[tuple[str, str]]) -> dict[str, str]:
        """The settings of StagingRecords (spark/jvm/StagingRecords.java): the same producer,
        headers, size check and report as this writer's. Where the JVM writes every value
        column's type, it makes each value and checksum itself (RecordJson), and Spark
        computes the key alone."""
        names = [name for name, _ in fields]
        if any(name not in names for name in self.columns):
            raise NotInJvm(f"the frame lacks the record columns {', '.join(self.columns)}")
        key, value, crc = (names.index(name) for name in self.columns)
        types = dict(fields)
        kinds = [jvm_type(types.get(column, "missing")) for column in self.value_of]
        if self.value_of and all(kinds):
            ordinals = [names.index(column) for column in self.value_of]
            record = {"json.columns": ",".join(map(str, ordinals)), "json.types": ",".join(kinds),
                      "json.names": ",".join(column.encode().hex() for column in self.value_of),
                      "json.nulls": "keep" if self.keep_nulls else "session",
                      "reads": ",".join(map(str, [key, *ordinals]))}
        else:
            record = {"value": str(value), "crc": str(crc), "reads": f"{key},{value},{crc}"}
        load, *extra = public_headers(self.load_id, self.headers)
        spec = {"kind": "kafka", "bootstrap": self.bootstrap, "topic": self.staging_topic, "key": str(key), **record,
                "load_id": self.load_id, "header.load": H_LOAD,
                "header.part": H_PART, "header.attempt": H_ATTEMPT,
                **{f"extra.{i}": f"{name}={content.hex()}" for i, (name, content) in enumerate(extra)},
                "max_in_flight": str(STAGING_MAX_IN_FLIGHT),
                **{f"producer.{k}": str(v) for k, v in self._java_producer().items()}}
        if self.max_message_bytes is not None:
            # open()'s framing, less the partition number's own bytes (the JVM adds those).
            headers = [load, (H_PART, b""), (H_ATTEMPT, b"0" * 16), *extra]
            framing = _RECORD_OVERHEAD + sum(len(k) + len(v) + 10 for k, v in headers)
            spec.update({"framing": str(framing), "max_message_bytes": str(self.max_message_bytes),
                         "limited_by": self.limited_by})
        return spec

    def _java_producer(self) -> dict:
        """The JVM staging producer's settings: the commit copy's, with its buffer pool sized to
        the staging topic. The Java client keeps every batch buffer it allocates until it
        closes, up to `buffer.memory`, and each task thread has a producer: at 64 MiB two
        threads' pools could hold 128 MiB of the driver's heap, and a 20M pass staged as fast
        with 16 MiB (bench/findings.md). A partition needs an open batch and the batches of
        its requests in flight (at most 5 with idempotence): `buffer.memory` = 6 x partitions
        x `batch.size`, at least 16 MiB, at most the 64 MiB the Python producer queues."""
        settings = java_producer_settings(self.bootstrap, self.max_message_bytes)
        wanted = 6 * self.partitions * settings["batch.size"]
        settings["buffer.memory"] = max(STAGING_BUFFER_FLOOR, min(settings["buffer.memory"], wanted))
        return settings

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
                raise RecordTooLarge(too_large(size, None if key is None else _as_bytes(key), self.max_message_bytes,
                                               self.max_message_bytes - self._room, self.limited_by))

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


def too_large(size: int, key: bytes | None, max_message_bytes: int, framing: int, limited_by: str) -> str:
    """The message of RecordTooLarge (a record of `size` key and value bytes, with `key`,
    over a topic's limit of which headers and framing take `framing`), from KafkaWriter or
    from its JVM form (spark/jvm_stage.py)."""
    shown = key.decode("utf-8", "backslashreplace") if key is not None else None
    return (f"record of {size:,} bytes (key and value) for key {one_line(repr(shown), 80)} exceeds the "
            f"max.message.bytes {max_message_bytes:,} of topic {limited_by} (headers and framing "
            f"take {framing:,} of it): make the record smaller in the job, or "
            "raise max.message.bytes of the target and staging topics (and the broker's message.max.bytes)")


def _as_bytes(value) -> bytes:
    if value is None:
        return b""
    return value.encode() if isinstance(value, str) else value
