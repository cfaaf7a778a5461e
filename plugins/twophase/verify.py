"""Independent check of the promise, read from the targets themselves.

For each load: rows in the Postgres target with its load_id, and records in the target
topic with header load_id read as a read_committed consumer, against the log:
COMMITTED -> exactly the voted counts; not committed -> nothing on either side;
COMMITTING -> in doubt (recovery finishes it), flagged only when half-visible; VIOLATED
-> always a violation. A COMMITTED load in replace mode whose rows a later committed
load of the same key range replaced is expected to have 0 rows left in Postgres.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Iterator

import psycopg2
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from .log import Load, TransactionLog
from .participants.kafka import kafka_client
from .spec import Connections
from .states import State


@dataclass(frozen=True)
class Finding:
    load_id: str
    state: str
    pg_rows: int
    kafka_records: int
    expected: str
    ok: bool
    problem: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def verify(log: TransactionLog, conns: Connections, loads: list[Load]) -> list[Finding]:
    topic_counts: dict[str, Counter] = {}
    findings = []
    for load in loads:
        spec = load.spec()
        if spec.kafka.topic not in topic_counts:
            topic_counts[spec.kafka.topic] = count_topic_by_load(conns.kafka_bootstrap, spec.kafka.topic)
        pg = count_table_rows(conns.pg_dsn, spec.postgres.table, load.load_id)
        kafka = topic_counts[spec.kafka.topic][load.load_id]
        findings.append(_judge(log, load, pg, kafka, loads))
    return findings


def _judge(log, load: Load, pg: int, kafka: int, loads: list[Load]) -> Finding:
    votes = log.votes(load.load_id)

    def finding(expected, ok, problem=""):
        return Finding(load.load_id, load.state.value, pg, kafka, expected, ok, problem)

    if load.state == State.COMMITTED:
        want_pg, want_kafka = votes["postgres"].count, votes["kafka"].count
        if _replaced_later(load, loads):
            want_pg = 0
        ok = (pg, kafka) == (want_pg, want_kafka)
        return finding(f"{want_pg} rows, {want_kafka} records", ok,
                       "" if ok else "committed load not exactly visible")
    if load.state == State.VIOLATED:
        return finding("-", False, f"load is VIOLATED: {load.reason}")
    if load.state == State.COMMITTING:
        want_kafka = votes["kafka"].count
        ok = pg == 0 and kafka in (0, want_kafka)
        return finding("in doubt: commit pending (recovery finishes it)", ok,
                       "" if ok else "partly visible while committing")
    ok = (pg, kafka) == (0, 0)
    return finding("nothing visible", ok, "" if ok else f"{load.state} load has visible data")


def _replaced_later(load: Load, loads: list[Load]) -> bool:
    """A later committed load swapped this load's rows out: it names this load in its
    `twophase.replaces` header (begin of a data interval in mode replace), or it is a
    replace of the same table and key range."""
    mine = load.participants["postgres"]
    for other in loads:
        if other.state != State.COMMITTED or other.began_at <= load.began_at:
            continue
        theirs = other.participants["postgres"]
        if load.load_id in other.participants["kafka"].get("headers", {}).get("twophase.replaces", "").split(","):
            return True
        if (mine["mode"] == theirs["mode"] == "replace" and theirs["table"] == mine["table"]
                and theirs["replace_where"] == mine["replace_where"]):
            return True
    return False


def count_table_rows(dsn: str, table: str, load_id: str) -> int:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("select to_regclass(%s)", (table,))
            if cur.fetchone()[0] is None:
                return 0
            cur.execute(f"select count(*) from {table} where load_id = %s", (load_id,))
            return cur.fetchone()[0]
    finally:
        conn.close()


def count_topic_by_load(bootstrap: str, topic: str) -> Counter:
    """Records per header load_id in the whole topic, read as read_committed."""
    counts: Counter = Counter()
    for msg in iter_topic(bootstrap, topic):
        load_id = dict(msg.headers() or []).get("load_id")
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
