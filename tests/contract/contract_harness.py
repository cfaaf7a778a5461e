"""One harness per participant implementation: what the contract suite needs to drive it.

A harness builds participants of its kind for a load id on fresh instances (the contract:
every hook may run on a fresh instance), stages N rows into one through the staging pass,
reads what a real reader of its targets sees, finds a load's leftover staging, loses a
load's prepared data from outside, and sweeps. The tests (test_participant_contract.py)
are written once against this interface; this module is the only place that constructs
participants, so a change of their constructors is absorbed here.

- MemoryHarness: MemoryParticipant over a MemoryStore (two targets), staged through
  LocalStage from plain rows. No server, no Spark: fast.
- PostgresHarness / KafkaHarness (KafkaJvmHarness: its copy in a JVM) / IcebergHarness:
  the real participants on the local
  stack, with two targets (two fresh tables in one database, two fresh topics on one
  cluster) or, for Iceberg, one (a fresh table of the stack's catalog, partitioned by
  day: a catalog commits one table at a time) per test. The normal staging pass is
  spark_stage.stage over the session's Spark;
  a pass with controlled task attempts (a first attempt that dies) computes the staged
  frame once with Spark (the participant's Staging.columns) and drives the writers
  in-process with LocalStage, as Spark would: fresh unpickled writers per attempt, only
  successful attempts report.

A crash is simply dropping the participant instance: nothing survives between hooks but
the vote, so whatever the load left on the server is what a killed process leaves.
"""

from __future__ import annotations

import itertools
import os
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Callable, Mapping

import pytest

from twophase import ids
from twophase.participants.contract import Participant, Swept
from twophase.participants.memory import LocalFrame, LocalStage, MemoryParticipant, MemoryStore
from twophase.protocol.votes import Vote

IMPLEMENTATIONS = ("memory", "memory-last", "postgres", "postgres-last", "kafka", "kafka-jvm", "iceberg")
LIAR_ENV = "TWOPHASE_CONTRACT_LIARS"  # set: the suite runs against each liar of liars.py too ("liar-<name>")
ROWS = 30          # rows per load
PARTITIONS = 3     # Spark partitions (partition 0 gets several batches)
BATCH_ROWS = 4     # rows per Arrow batch in the in-process staging pass
_serial = itertools.count(1)


def violated_by(**reasons: str):
    """Mark a contract test as known to fail for these implementations ({kind: reason}):
    conftest turns each into xfail(strict=True) for that implementation only."""
    def mark(test):
        test.violated_by = reasons
        return test
    return mark


@dataclass
class Staged:
    """One participant's staging pass: what its prepare() takes."""

    marks: dict
    reports: dict[str, list[dict]]   # per target, the successful attempts' reports
    expected: dict[str, int]         # per target, the rows the pass streamed
    attempts: list | None = None     # LocalStage.attempts when attempts were controlled


class Harness(ABC):
    kind: str
    participant_class: type[Participant]
    sweeps_staging = True  # False: staging of this kind is never swept (Kafka: retention deletes it)
    holds_when_ready = False  # True: ready() takes something that blocks others (a prepared transaction)

    def __init__(self, request: pytest.FixtureRequest):
        self.request = request
        self.load_ids: list[str] = []

    def load_id(self, pipeline: str = "contract") -> str:
        """A fresh load id of this test (cleaned up at close), of pipeline `contract` unless
        told (a test that sweeps a whole pipeline as unknown sweeps one of its own: every
        worker's contract tests stage loads of `contract` meanwhile)."""
        lid = ids.load_id_for(pipeline, f"{self.request.node.name}-{next(_serial)}-{id(self):x}")
        self.load_ids.append(lid)
        return lid

    @abstractmethod
    def participant(self, load_id: str, attempt: int = 1) -> Participant:
        """A fresh instance for the load (acting on prepare attempt `attempt`'s staging),
        as a later step in another process builds it."""

    @property
    @abstractmethod
    def endpoint(self) -> str: ...

    @abstractmethod
    def stage(self, p: Participant, rows: int = ROWS, attempts: LocalStage | None = None) -> Staged:
        """p.stage() then the staging pass over `rows` rows. `attempts`: a LocalStage
        whose knobs (crash_midway, crash_staged) make some first attempts die."""

    @abstractmethod
    def seen(self, load_id: str) -> dict[str, int]:
        """Per target, the load's rows a real reader sees now (not through visible())."""

    @abstractmethod
    def leftovers(self, load_id: str) -> list[str]:
        """The load's staging and prepared data still on the server, described."""

    @abstractmethod
    def lose_prepared(self, load_id: str, vote: Vote) -> None:
        """Lose the load's prepared data outside the protocol (an operator, retention)."""

    def lose_staged(self, load_id: str, vote: Vote) -> None:
        """Lose what the load staged while it waits for its vote (prepared, not ready):
        what a server restart or retention can take. Default: as lose_prepared."""
        self.lose_prepared(load_id, vote)

    def held(self, load_id: str) -> list[str]:
        """What the load holds on the server that blocks others (open or prepared
        transactions, locks), described. Default: nothing of the kind exists."""
        return []

    def sweep(self, state_of: Callable[[set[str]], Mapping], pipeline: str | None = None) -> list[Swept]:
        return self.participant_class.sweep(self.endpoint, state_of, pipeline)

    def prepare(self, p: Participant, staged: Staged, expected: Mapping[str, int] | None = None) -> Vote:
        return p.prepare(staged.marks, staged.reports, dict(expected if expected is not None else staged.expected))

    def nothing(self, p: Participant) -> dict[str, int]:
        return {t: 0 for t in p.targets}

    def all_rows(self, p: Participant, rows: int = ROWS) -> dict[str, int]:
        return {t: rows for t in p.targets}

    def close(self) -> None:
        """Discard whatever the test's loads left (a failed test must not leave locks)."""


def _staged_of(p: Participant, marks: dict, staged) -> Staged:
    """Our participant's share of a spark_stage.Staged."""
    return Staged(marks, staged.reports[p.name], {t: staged.expected[t] for t in p.targets})


# -- memory ------------------------------------------------------------------------------------


class MemoryHarness(Harness):
    kind = "memory"
    participant_class = MemoryParticipant
    TARGETS = ("mem.orders", "mem.daily")
    NAME = "memory"

    def __init__(self, request, participant_class: type[MemoryParticipant] = MemoryParticipant):
        super().__init__(request)
        self.store = MemoryStore()
        self.participant_class = participant_class

    @property
    def endpoint(self) -> str:
        return self.store.endpoint

    def participant(self, load_id: str, attempt: int = 1) -> MemoryParticipant:
        return self.participant_class(self.store, load_id, self.TARGETS, name=self.NAME, attempt=attempt)

    def held(self, load_id):
        with self.store.lock:
            return [f"{name} holds load {lid}" for name, lid in self.store.held if lid == load_id]

    def stage(self, p, rows=ROWS, attempts=None) -> Staged:
        frame = LocalFrame.of_rows([{"customer_id": f"c{i:06d}", "orders": i % 7 + 1} for i in range(rows)],
                                   partitions=PARTITIONS, batch_rows=BATCH_ROWS)
        staging = p.stage({"": frame.columns})
        run = attempts or LocalStage()
        return replace(_staged_of(p, staging.marks, run(frame, {p.name: staging})), attempts=run.attempts)

    def seen(self, load_id):
        with self.store.lock:
            committed = self.store.committed.get((self.NAME, load_id), {})
            return {t: len(committed.get(t, [])) for t in self.TARGETS}

    def leftovers(self, load_id):
        with self.store.lock:
            found = [f"{n} rows staged in {t} part {part} attempt {a}"
                     for (lid, t, part, a), rows in self.store.staged.items() if lid == load_id and (n := len(rows))]
            if self.store.is_prepared(self.NAME, load_id):
                found.append("prepared data")
        return found

    def lose_prepared(self, load_id, vote):
        assert self.store.lose(self.NAME, load_id), "nothing was prepared to lose"


# -- the real participants ---------------------------------------------------------------------


class MemoryLastHarness(MemoryHarness):
    """The in-memory participant as a load's last resource (docs/adr/0011)."""

    def participant(self, load_id: str, attempt: int = 1) -> MemoryParticipant:
        p = super().participant(load_id, attempt)
        p.last_resource = True
        return p


class SparkHarness(Harness):
    """Stages make_df's rows (tests/support) with the session's Spark."""

    def stage(self, p, rows=ROWS, attempts=None) -> Staged:
        from pyspark.sql import functions as F

        from support import make_df
        from twophase.spark import stage as spark_stage

        # A day of its own per staging pass: two loads prepared at once into a keyed table
        # would wait on each other's prepared rows.
        day = (date(2026, 1, 1) + timedelta(days=next(_serial))).isoformat()
        df = make_df(self.request.getfixturevalue("spark"), rows, partitions=PARTITIONS, day=day)
        staging = p.stage({"": list(df.columns)})  # the job's main frame only
        if attempts is None:
            return _staged_of(p, staging.marks, spark_stage.stage(df, {p.name: staging}))
        # The staged frame as the staging pass computes it (every target's extra columns), once;
        # then the writers in-process.
        extra = {n: sql for target in staging.writers for n, sql in staging.columns.get(target, {}).items()}
        table = df.select("*", *[F.expr(sql).alias(n) for n, sql in extra.items()]).toArrow()
        size = -(-table.num_rows // PARTITIONS)
        frame = LocalFrame({part: table.slice(part * size, size).to_batches(max_chunksize=BATCH_ROWS)
                            for part in range(PARTITIONS)})
        result = attempts(frame, {p.name: replace(staging, columns={})})
        return replace(_staged_of(p, staging.marks, result), attempts=attempts.attempts)


class PostgresHarness(SparkHarness):
    kind = "postgres"
    holds_when_ready = True  # the prepared transaction, with its locks on the target tables

    def __init__(self, request):
        super().__init__(request)
        from twophase.participants.postgres import PostgresParticipant
        from twophase.participants.postgres import PostgresTarget

        self.participant_class = PostgresParticipant
        self.dsn = request.getfixturevalue("pg_dsn")
        first = request.getfixturevalue("target")["table"]
        self.tables = [first, f"{first}_b"]  # two tables: one prepared transaction covers both
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"create table {self.tables[1]} (like {first} including all)")
        finally:
            conn.close()
        self.targets = [PostgresTarget(t) for t in self.tables]

    @property
    def endpoint(self) -> str:
        return self.dsn

    def participant(self, load_id, attempt=1):
        return self.participant_class(self.dsn, self.targets, load_id, attempt=attempt)

    def seen(self, load_id):
        from support import count_table_rows

        return {t: count_table_rows(self.dsn, t, load_id) for t in self.tables}  # connections of its own

    def _gids(self, cur, load_id) -> list[str]:
        cur.execute("select gid from pg_prepared_xacts where gid like %s and database = current_database()",
                    (ids.GID_PREFIX + "%",))
        return [g for (g,) in cur.fetchall() if ids.load_id_of_gid(g) == load_id]

    def _staging_tables(self, cur, load_id) -> list[str]:
        cur.execute("""select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
                       where n.nspname = %s and c.relkind = 'r' and obj_description(c.oid, 'pg_class') = %s""",
                    (ids.STAGING_SCHEMA, load_id))
        return [r[0] for r in cur.fetchall()]

    def _connect(self):
        import psycopg2

        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        return conn

    def leftovers(self, load_id):
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                return ([f"prepared transaction {g}" for g in self._gids(cur, load_id)]
                        + [f"staging table {ids.STAGING_SCHEMA}.{t}" for t in self._staging_tables(cur, load_id)])
        finally:
            conn.close()

    def held(self, load_id):
        """The load's prepared transactions, and any lock on a target table that a session
        or prepared transaction took for it (staging tables aside)."""
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                held = [f"prepared transaction {g}" for g in self._gids(cur, load_id)]
                cur.execute("""select l.relation::regclass::text, l.mode from pg_locks l
                               join pg_prepared_xacts x on l.virtualtransaction = '-1/' || x.transaction
                               where x.gid like %s and l.relation is not null""", (f"%{load_id}%",))
                return held + [f"{mode} on {rel}" for rel, mode in cur.fetchall()]
        finally:
            conn.close()

    def lose_staged(self, load_id, vote):
        """Empty the load's staging tables, as Postgres crash recovery does to unlogged tables."""
        self._each_staging_table(load_id, "truncate")

    def _each_staging_table(self, load_id: str, statement: str) -> None:
        """`statement` (truncate, drop table) on each of the load's staging tables."""
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                tables = self._staging_tables(cur, load_id)
                assert tables, "nothing was staged to lose"
                for table in tables:
                    cur.execute(f"{statement} {ids.STAGING_SCHEMA}.{table}")
        finally:
            conn.close()

    def lose_prepared(self, load_id, vote):
        """ROLLBACK PREPARED of the load's transaction from outside, as an operator would."""
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                gids = self._gids(cur, load_id)
                assert gids, "nothing was prepared to lose"
                for gid in gids:
                    cur.execute("rollback prepared %s", (gid,))
        finally:
            conn.close()

    def close(self):
        from psycopg2 import sql

        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute("set lock_timeout = '10s'")
                for lid in self.load_ids:
                    for gid in self._gids(cur, lid):
                        cur.execute("rollback prepared %s", (gid,))
                    for table in self._staging_tables(cur, lid):
                        cur.execute(sql.SQL("drop table if exists {}").format(sql.Identifier(ids.STAGING_SCHEMA, table)))
                for table in self.tables:
                    cur.execute(f"drop table if exists {table}")
        finally:
            conn.close()


class PostgresLastHarness(PostgresHarness):
    """Postgres as a load's last resource (docs/adr/0011): no prepared transaction; its
    commit is one local transaction with its decision's marker. Its prepared data is its
    staging, which an operator loses by dropping it."""

    holds_when_ready = False

    def __init__(self, request):
        super().__init__(request)
        self.targets = [replace(t, prepared=False) for t in self.targets]

    def participant(self, load_id, attempt=1):
        p = super().participant(load_id, attempt)
        p.last_resource = True
        return p

    def lose_prepared(self, load_id, vote):
        self._each_staging_table(load_id, "drop table")


class KafkaHarness(SparkHarness):
    kind = "kafka"
    sweeps_staging = False  # staged records are never promoted, and expire with the staging topic's retention

    def __init__(self, request):
        super().__init__(request)
        from twophase.participants.kafka import KafkaParticipant
        from twophase.participants.kafka import KafkaTarget

        self.participant_class = KafkaParticipant
        self.bootstrap = request.getfixturevalue("kafka_bootstrap")
        first = request.getfixturevalue("target")["topic"]
        # two topics: one copy transaction covers both
        self.targets = [KafkaTarget(t, key_column="customer_id", partitions=PARTITIONS) for t in (first, f"{first}-b")]

    @property
    def endpoint(self) -> str:
        return self.bootstrap

    def participant(self, load_id, attempt=1):
        return self.participant_class(self.bootstrap, self.targets, load_id, attempt=attempt)

    def seen(self, load_id):
        """Records with header load_id, read by a read_committed consumer of each topic."""
        from support import header, read_topic

        return {t.topic: Counter(header(msg, "load_id") for msg in read_topic(self.bootstrap, t.topic))[load_id]
                for t in self.targets}

    def leftovers(self, load_id):
        return []  # nothing a sweep could act on: staged records are left to retention

    def lose_prepared(self, load_id, vote):
        """Delete the staging topic's records (as retention would), so the staged ranges
        the vote names are gone."""
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka.admin import AdminClient

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"contract-{load_id}"})
        try:
            ends = []
            for staging in (t.staging_topic for t in self.targets):
                metadata = consumer.list_topics(staging, timeout=30).topics[staging]
                ends += [TopicPartition(staging, p, consumer.get_watermark_offsets(TopicPartition(staging, p),
                                                                                   timeout=30)[1])
                         for p in metadata.partitions]
        finally:
            consumer.close()
        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # referenced until the futures end
        futures = admin.delete_records([tp for tp in ends if tp.offset > 0], request_timeout=30, operation_timeout=30)
        for future in futures.values():
            future.result(60)

    def close(self):
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        existing = admin.list_topics(timeout=30).topics
        topics = [name for t in self.targets for name in (t.topic, t.staging_topic) if name in existing]
        for future in (admin.delete_topics(topics, operation_timeout=30).values() if topics else ()):
            try:
                future.result(60)
            except Exception:  # noqa: BLE001 - hygiene only: a leftover test topic harms nothing
                pass


class KafkaJvmHarness(KafkaHarness):
    """The Kafka participant whose commit copy runs in a JVM (kafka/jvm_copy.py) whatever
    the load's size."""

    kind = "kafka-jvm"

    def __init__(self, request):
        super().__init__(request)
        from twophase.participants.kafka import jvm_copy

        if not os.environ.get(jvm_copy.CLASSPATH_ENV):
            pytest.fail(f"{jvm_copy.CLASSPATH_ENV} is not set: run the tests with the stack's environment")
        request.getfixturevalue("monkeypatch").setenv(jvm_copy.MIN_RECORDS_ENV, "0")


class IcebergHarness(SparkHarness):
    kind = "iceberg"
    def __init__(self, request):
        super().__init__(request)
        from support import ICEBERG_COLUMNS
        from twophase.participants.iceberg import IcebergParticipant
        from twophase.participants.iceberg import IcebergTarget

        self.participant_class = IcebergParticipant
        self.catalog = request.getfixturevalue("iceberg_catalog")  # support's helpers read the same (env)
        name = request.getfixturevalue("target")["table"]  # contract_tests.<test's name>: a fresh table
        self.targets = [IcebergTarget(name, columns=ICEBERG_COLUMNS, partition_by=("day",))]

    @property
    def endpoint(self) -> str:
        return self.catalog

    def participant(self, load_id, attempt=1):
        return self.participant_class(self.catalog, self.targets, load_id, name=f"iceberg:{self.targets[0].table}",
                                      attempt=attempt)

    def seen(self, load_id):
        """Rows with the load's id in the table's current snapshot, scanned by pyiceberg."""
        from support import count_iceberg_rows

        return {self.targets[0].name: count_iceberg_rows(self.targets[0].table, load_id)}

    def leftovers(self, load_id):
        from support import iceberg_leftovers

        return [f"staged file {uri}" for uri in iceberg_leftovers(self.targets[0].table, load_id)]

    def lose_prepared(self, load_id, vote):
        """Delete the staged files, as an operator's orphan-file cleanup would."""
        from twophase.participants.iceberg.catalog import delete_files

        assert vote.committable["files"], "nothing was staged to lose"
        delete_files(vote.committable["files"])

    def close(self):
        from support import drop_iceberg_table

        drop_iceberg_table(self.targets[0].table)


HARNESSES: dict[str, type[Harness]] = {"memory": MemoryHarness, "memory-last": MemoryLastHarness,
                                       "postgres": PostgresHarness, "postgres-last": PostgresLastHarness,
                                       "kafka": KafkaHarness, "kafka-jvm": KafkaJvmHarness,
                                       "iceberg": IcebergHarness}


def implementations() -> list[str]:
    """The kinds the suite runs against: the real ones, and with LIAR_ENV set each liar of
    liars.py as `liar-<name>` (test_liars_are_rejected.py)."""
    if not os.environ.get(LIAR_ENV):
        return list(IMPLEMENTATIONS)
    from liars import LIARS

    return [*IMPLEMENTATIONS, *(f"liar-{name}" for name in LIARS)]


def harness_for(kind: str, request) -> Harness:
    if kind.startswith("liar-"):
        from liars import LIARS

        return MemoryHarness(request, LIARS[kind.removeprefix("liar-")])
    return HARNESSES[kind](request)
