"""The Kafka client plumbing: every client the project creates is configured, logged and
closed here, and a broker that does not answer becomes KafkaUnreachable here."""

from __future__ import annotations

import logging
import os
import re
import time
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from ...errors import one_line
from ...server_errors import kafka_unreachable
from .target import KafkaTarget

_log = logging.getLogger("twophase.kafka")
# Same partitioner as Java clients, so keys land where Java producers would put them.
# The local queue holds up to 500,000 records or 64 MiB: Python hands records over in
# Arrow batches faster than the broker acknowledges them, and with librdkafka's default
# (100,000) the producer spent a third of its time waiting on a full queue. The byte cap
# keeps a worker's memory bounded whatever the load's size.
_PRODUCER_BASE = {"partitioner": "murmur2_random", "compression.type": "lz4", "linger.ms": 20,
                  "batch.size": 1 << 20, "queue.buffering.max.messages": 500_000,
                  "queue.buffering.max.kbytes": 1 << 16}

# The broker's default max.message.bytes (a topic's limit unless set on the topic).
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
TIMEOUT_ENV = "TWOPHASE_KAFKA_TIMEOUT_S"


def request_timeout_s() -> float:
    """How long one request of a step waits for Kafka to answer before the step gives up
    (a broker down: KafkaUnreachable, "retry later"): TWOPHASE_KAFKA_TIMEOUT_S, default 30
    seconds. What waits on the cluster's own work (a transaction's start or end, a topic's
    creation, retries of passing errors) waits twice as long."""
    raw = os.environ.get(TIMEOUT_ENV, "30")
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r}: a number of seconds above 0")
    return value


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
    "[thrd:127.0.0.1:19092/bootstrap]: 127.0.0.1:19092/bootstrap: Connect to ipv4#127.0.0.1:19092
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
    the client saw ("Connect to ipv4#127.0.0.1:19092 failed: Connection refused")."""
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


def group_consumer(bootstrap: str, group: str):
    """A consumer of `group` that commits nothing by itself (a context manager): what a
    group's offsets are committed through, plainly or into a transaction."""
    return kafka_client(Consumer, bootstrap, **{"group.id": group, "enable.auto.commit": False})


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
    client.list_topics(timeout=request_timeout_s())
    return client


# Errors that clear within seconds: a young or busy broker's while __consumer_offsets or
# the transaction log is loading or moving, and a new topic's until its partitions have
# their leader.
_PASSING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT,
            KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}


def patiently(call, patience_s: float | None = None, also: frozenset = frozenset()):
    """call(), retried with backoff while Kafka answers with a passing error (or one of
    `also`), for at most `patience_s` (default: twice request_timeout_s())."""
    deadline, pause = time.monotonic() + (2 * request_timeout_s() if patience_s is None else patience_s), 0.2
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


def ensure_topics(bootstrap: str, target: KafkaTarget) -> dict[str, int]:
    """Create the target and staging topics when missing; idempotent. Returns each topic's
    max.message.bytes (the largest record batch its broker accepts)."""
    with kafka_client(AdminClient, bootstrap) as admin:
        _create_missing(admin, target)
        # A topic created a moment ago can be unknown to the broker answering for a moment.
        return patiently(lambda: _topic_setting(admin, [target.topic, target.staging_topic], "max.message.bytes"),
                          also=frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART}))


def topic_setting(bootstrap: str, topics: list[str], name: str) -> dict[str, int]:
    """Each topic's integer setting `name` (retention.ms...), as the brokers apply it."""
    with kafka_client(AdminClient, bootstrap) as admin:
        return patiently(lambda: _topic_setting(admin, topics, name))


def _topic_setting(admin: AdminClient, topics: list[str], name: str) -> dict[str, int]:
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics],
                                     request_timeout=request_timeout_s())
    return {resource.name: int(future.result(2 * request_timeout_s())[name].value) for resource, future in futures.items()}


def _create_missing(admin: AdminClient, target: KafkaTarget) -> None:
    existing = admin.list_topics(timeout=request_timeout_s()).topics
    replicas = -1 if target.replication_factor is None else target.replication_factor  # -1: the broker's default
    wanted = [
        NewTopic(target.topic, target.partitions, replicas, config=dict(target.topic_config)),
        NewTopic(target.staging_topic, target.partitions, replicas, config=target.staging_config()),
    ]
    missing = [t for t in wanted if t.topic not in existing]
    if not missing:
        return
    for topic, future in admin.create_topics(missing, operation_timeout=request_timeout_s()).items():
        try:
            future.result(2 * request_timeout_s())
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # created concurrently
                raise


def java_producer_settings(bootstrap: str, max_message_bytes: int | None) -> dict:
    """The settings of an idempotent Java producer that does what the Python producers'
    (_PRODUCER_BASE, _size_settings) do, in the Java client's names: the JVM commit copy's
    (jvm_copy.py) and the JVM staging pass's (KafkaWriter.jvm_spec)."""
    timeout_ms = int(request_timeout_s() * 1000)
    sized = _size_settings(max_message_bytes)
    base = {**_PRODUCER_BASE, **sized}
    return {"bootstrap.servers": bootstrap, "enable.idempotence": "true", "acks": "all",
            "compression.type": base["compression.type"], "linger.ms": base["linger.ms"],
            "batch.size": base["batch.size"], "buffer.memory": base["queue.buffering.max.kbytes"] * 1024,
            "max.request.size": max(1 << 20, sized.get("message.max.bytes", 0)), "request.timeout.ms": timeout_ms,
            "max.block.ms": 2 * timeout_ms, "delivery.timeout.ms": max(120_000, timeout_ms + base["linger.ms"])}


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
