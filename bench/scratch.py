"""What each repetition creates, and its cleanup: tables in schema `bench`, topics named
bench-*, and the atomic load's traces (its transaction log rows, commit marker, the
copy's consumer group). `sweep` also removes what an interrupted earlier run left."""

from __future__ import annotations

import uuid
from contextlib import closing, contextmanager

import psycopg2
from confluent_kafka.admin import AdminClient, NewTopic

from . import data

SCHEMA = "bench"
TOPIC_PREFIX = "bench-"
PIPELINE = "bench"  # the pipeline name of the atomic loads in the transaction log
PARTITIONS = 3      # of every topic, as KafkaTarget's default


def sql(dsn: str, *statements, args=None) -> list:
    with closing(psycopg2.connect(dsn)) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            rows = []
            for statement in statements:
                cur.execute(statement, args)
                rows = cur.fetchall() if cur.description else []
            return rows


def new_name() -> str:
    return uuid.uuid4().hex[:10]


def create_table(dsn: str, shape: str, name: str, partitioned: bool = False) -> str:
    table = f"{SCHEMA}.t_{name}"
    sql(dsn, f"create schema if not exists {SCHEMA}", data.table_ddl(shape, table, partitioned))
    return table


def count_rows(dsn: str, table: str) -> int:
    return sql(dsn, f"select count(*) from {table}")[0][0]


def drop_table(dsn: str, table: str) -> None:
    sql(dsn, f"drop table if exists {table}")


@contextmanager
def written_table(dsn: str, shape: str, rows: int, writer: str):
    """A fresh table for one timed write: yields its name; on a clean exit checks that the
    write left exactly `rows` rows (naming `writer`); always drops the table."""
    table = create_table(dsn, shape, new_name())
    try:
        yield table
        got = count_rows(dsn, table)
        assert got == rows, f"{writer} wrote {got} rows of {rows}"
    finally:
        drop_table(dsn, table)


def create_topic(bootstrap: str, name: str) -> str:
    topic = f"{TOPIC_PREFIX}{name}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    return topic


def count_records(bootstrap: str, topic: str) -> int:
    """Records in a non-transactional topic (end offsets; no control records)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count"})
    try:
        parts = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts)
    finally:
        consumer.close()


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=30).topics)
    doomed = [t for t in topics if t in existing]
    for future in admin.delete_topics(doomed, operation_timeout=30).values() if doomed else []:
        future.result(60)


def forget_load(dsn: str, bootstrap: str, load_id: str) -> None:
    """Remove a finished bench load from the transaction log and its consumer group."""
    from twophase.ids import copy_transactional_id, pg_gid
    from twophase.participants.postgres import MARKERS

    sql(dsn, "delete from twophase.transitions where load_id = %(id)s",
        "delete from twophase.votes where load_id = %(id)s",
        "delete from twophase.loads where load_id = %(id)s",
        f"delete from {MARKERS} where gid = %(gid)s", args={"id": load_id, "gid": pg_gid(load_id)})
    delete_groups(bootstrap, [copy_transactional_id(load_id)])


def delete_groups(bootstrap: str, groups: list[str]) -> None:
    """Remove consumer groups; one that does not exist (nothing was committed) is skipped."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
        try:
            future.result(60)
        except Exception:  # noqa: BLE001 - no such group: nothing to delete
            pass


def settle(log, conns, load_id: str) -> None:
    """End a bench load left open: finish its commit if decided so, else roll it back."""
    from twophase.protocol import coordinator
    from twophase.log import UnknownLoad
    from twophase.protocol.states import TERMINAL, State

    try:
        state = log.get(load_id).state
    except UnknownLoad:
        return
    if state == State.COMMITTING:
        coordinator.commit(log, conns, load_id)
    elif state not in TERMINAL:
        coordinator.rollback(log, conns, load_id, reason="bench: the load did not finish")


def sweep(dsn: str, bootstrap: str) -> None:
    """Leftovers of an interrupted run: bench loads still open are settled, then every
    bench table, topic and log entry is removed."""
    from twophase.log import PostgresLog
    from twophase.connections import Connections

    conns = Connections(dsn, bootstrap)
    log = PostgresLog(dsn)
    log.ensure_schema()
    for (load_id,) in sql(dsn, "select load_id from twophase.loads where pipeline = %s", args=(PIPELINE,)):
        settle(log, conns, load_id)
        forget_load(dsn, bootstrap, load_id)
    tables = sql(dsn, "select schemaname || '.' || tablename from pg_tables where schemaname = %s", args=(SCHEMA,))
    for (table,) in tables:
        drop_table(dsn, table)
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    delete_topics(bootstrap, [t for t in topics if t.startswith(TOPIC_PREFIX)])
