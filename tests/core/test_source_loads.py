"""Loads that read a source through Spark, on the stack: events produced to a Kafka topic
while loads run, one rolled back, reach the Postgres table, the output topic and the
Iceberg table exactly once (an independent read of the whole source topic equals the union of the committed
loads), and the pipeline's consumer group shows where the committed loads got to (in the
copy transaction, or after the commit when the load has no Kafka target); a file that
grows after begin fails its load, named, and the next load reads it."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import psycopg2
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F

from source_events import job, load_new_events, spec_for
from support import create_schema, drop_iceberg_table, header, iceberg_table, read_topic, wait_settled
from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.ops import recovery
from twophase.ops.verify import verify
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.sources import Range, SourceError
from twophase.sources.files import FilesSource
from twophase.participants.kafka import jvm_copy
from twophase.sources.kafka import KafkaSource

pytestmark = pytest.mark.slow
DRIVER = Path(__file__).with_name("source_driver.py")


@pytest.fixture
def conns(pg_dsn, kafka_bootstrap, iceberg_catalog) -> Connections:
    """The servers, with the stack's Iceberg catalog: the events pipeline loads an Iceberg table."""
    return Connections(pg_dsn, kafka_bootstrap, iceberg_catalog=iceberg_catalog)


@pytest.fixture
def events(pg_dsn, kafka_bootstrap, unique_name):
    """A source topic of three partitions, an output table, topic and Iceberg table named
    after the test (the Iceberg one made by the first load, purged after the test)."""
    name = unique_name.replace("_", "-")
    source, output, table = f"{name}-in", f"{name}-out", f"core_tests.{unique_name}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept until its answer came
    admin.create_topics([NewTopic(source, 3, 1)])[source].result()
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "core_tests")
        cur.execute(f"create table {table} (event_id text primary key, customer_id text, amount int, "
                    "load_id text not null)")
    yield {"source": source, "output": output, "table": table, "pipeline": name, "iceberg": f"{table}_lake"}
    drop_iceberg_table(f"{table}_lake")


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The consumer group's committed offsets of the topic's three partitions (-1001: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(3)],
                                                                    timeout=30)}
    finally:
        consumer.close()


def ends(load) -> dict[int, int]:
    return {int(p): end for p, (_, end) in Range.from_json(load.source_range).position["partitions"].items()}


def assert_exactly_once(events: dict, bootstrap: str, pg_dsn: str, produced: int) -> None:
    """An independent read of the whole source topic equals the union of the committed
    loads, in the table and in the output topic: no event lost, none twice."""
    everything = sorted(json.loads(m.value())["event_id"] for m in read_topic(bootstrap, events["source"]))
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select event_id from {events['table']} order by event_id")
        in_table = [r[0] for r in cur.fetchall()]
    committed = {x.load_id for x in PostgresLog(pg_dsn).of_source(f"kafka:default/{events['source']}#"
                                                                   f"{events['pipeline']}")
                 if x.state == State.COMMITTED}
    out = [m for m in read_topic(bootstrap, events["output"]) if header(m, "load_id") in committed]
    lake = iceberg_table(events["iceberg"]).scan(selected_fields=("event_id", "load_id")).to_arrow().to_pylist()
    assert len(everything) == produced
    assert in_table == everything  # every event once (the primary key would refuse a second)
    assert sorted(m.key().decode() for m in out) == everything
    assert sorted(r["event_id"] for r in lake) == everything and {r["load_id"] for r in lake} <= committed


class Generator(threading.Thread):
    """Produces order events to the topic until stopped, some 15 a second: batches of 1 to
    5, each a transaction, one in five of them aborted (never readable, markers in the
    offsets)."""

    def __init__(self, bootstrap: str, topic: str, seed: int):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rng = bootstrap, topic, random.Random(seed)
        self.produced, self.stop, self.error = 0, threading.Event(), None

    def run(self) -> None:
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"gen-{self.topic}"})
            producer.init_transactions(30)
            n = 0
            while not self.stop.wait(0.2):
                producer.begin_transaction()
                batch = self.rng.randint(1, 5)
                for i in range(n, n + batch):
                    value = {"event_id": f"e{i}", "customer_id": f"c{i % 7}", "amount": i % 11}
                    producer.produce(self.topic, json.dumps(value).encode(), key=f"c{i % 7}".encode())
                if self.rng.random() < 0.2:
                    producer.abort_transaction(30)
                    continue
                producer.commit_transaction(30)
                n += batch
                self.produced = n
        except Exception as exc:  # noqa: BLE001 - the test reports it
            self.error = exc


def sessions_ended(dsn: str, application: str, timeout: float = 60) -> None:
    """Wait until the Postgres sessions of a killed process are gone: a server reads what
    the process sent before it died (a COMMIT among it) before it ends the session."""
    deadline = time.monotonic() + timeout
    while True:
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("select count(*) from pg_stat_activity where application_name = %s", (application,))
            left = cur.fetchone()[0]
        if not left:
            return
        assert time.monotonic() < deadline, f"{left} sessions of {application!r} still open after {timeout} s"
        time.sleep(0.05)


def test_loads_killed_at_random_instants_while_events_keep_coming_end_exactly_once(spark, events, kafka_bootstrap,
                                                                                    pg_dsn, conns):
    """The run (begin to commit, in its own process with its own Spark) SIGKILLed at random
    instants across 12 and more loads of at most 25 offsets while the generator produces;
    after each kill recovery resolves what it left; at the end the source drains and the
    committed loads hold every event once."""
    rng, log = random.Random(2511), PostgresLog(pg_dsn)
    source = KafkaSource(events["source"], group=events["pipeline"], cap=25)
    generator = Generator(kafka_bootstrap, events["source"], seed=7)
    generator.start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), str(Path(__file__).parent),
                                                        os.environ.get("PYTHONPATH", "")])}
    kills = 0
    try:
        while len(log.of_source(source.key)) < 12:
            driver = subprocess.Popen([sys.executable, str(DRIVER), json.dumps(events), f"k{kills}", "25"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True)
            assert driver.stdout.readline().strip() == "ready", driver.stderr.read()[-3000:]
            time.sleep(rng.uniform(2.0, 20.0))  # a random instant of its loads
            assert driver.poll() is None, f"the run ended by itself:\n{driver.stderr.read()[-3000:]}"
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
            sessions_ended(pg_dsn, f"source-driver k{kills}")  # a COMMIT it sent lands before recovery looks
            kills += 1
            actions = recovery.recover(log, conns, deadline=timedelta(0), pipeline=events["pipeline"])
            assert not [a for a in actions if a.action == "failed"], actions
            assert log.unresolved(events["pipeline"]) == []
    finally:
        generator.stop.set()
        generator.join(60)
    assert generator.error is None, generator.error
    wait_settled(kafka_bootstrap, events["source"])
    uncapped = replace(source, cap=0)  # the same source (its key has no cap): what is left, in one load
    for n in range(3):
        try:
            load_new_events(log, conns, spark, events, f"drain-{n}", uncapped)
        except coordinator.NothingToRead:
            break
    loads = log.of_source(source.key)
    states = Counter(x.state for x in loads)
    print(f"{kills} kills, {len(loads)} loads: {dict(states)}; {generator.produced} events, each once")
    assert kills >= 3 and len(loads) >= 12 and set(states) <= {State.COMMITTED, State.ABORTED}, states
    assert_exactly_once(events, kafka_bootstrap, pg_dsn, generator.produced)
    findings = verify(log, conns, loads)
    assert all(f.ok for f in findings), [f for f in findings if not f.ok]


@pytest.mark.parametrize("copy_in", ["python", "jvm"])
def test_kafka_source_loads_are_exactly_once_while_events_keep_coming(spark, events, kafka_bootstrap, pg_dsn,
                                                                       conns, copy_in, monkeypatch):
    # The source group's offsets go into the copy transaction of the one process or the other.
    monkeypatch.setenv(jvm_copy.MIN_RECORDS_ENV, "0" if copy_in == "jvm" else str(10**12))
    log, rng = PostgresLog(pg_dsn), random.Random(25)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"gen-{events['source']}"})
    producer.init_transactions(30)
    source = KafkaSource(events["source"], group=events["pipeline"], cap=40)
    produced, outcomes = 0, []
    for i in range(4):
        producer.begin_transaction()  # a batch of events, committed as a transaction (markers in the offsets)
        for _ in range(rng.randint(0, 30)):
            value = {"event_id": f"e{produced}", "customer_id": f"c{produced % 5}", "amount": produced % 11}
            producer.produce(events["source"], json.dumps(value).encode(), key=f"c{produced % 5}".encode())
            produced += 1
        producer.commit_transaction(30)
        spec = spec_for(events, f"run-{i}", source)
        load = coordinator.begin(log, spec, conns)
        coordinator.prepare(log, conns, spec.load_id, job(spark, load, conns))
        rules = [lambda *_: "rolled back by the test"] if i == 1 else []
        decided = coordinator.vote(log, conns, spec.load_id, rules=rules)
        if decided.state == State.COMMITTING:
            coordinator.commit(log, conns, spec.load_id)
        else:
            coordinator.rollback(log, conns, spec.load_id)
        outcomes.append(log.get(spec.load_id).state)
        # The pipeline's consumer group shows the last committed load's end, committed in its
        # copy transaction (Kafka's own tools read the lag from it); a rolled back load moves nothing.
        shown = [ends(x) for x in log.recent(100, events["pipeline"]) if x.state == State.COMMITTED][:1]
        assert group_offsets(kafka_bootstrap, events["pipeline"], events["source"]) == (
            shown[0] if shown else {p: -1001 for p in range(3)})
    # Whatever the cap left over: loads until the source is drained (once its last
    # transaction's markers are written: until then a range ends before its records).
    wait_settled(kafka_bootstrap, events["source"])
    for i in range(4, 20):
        spec = spec_for(events, f"run-{i}", source)
        load = coordinator.begin(log, spec, conns)
        if Range.from_json(load.source_range).empty:
            coordinator.rollback(log, conns, spec.load_id, reason="nothing new")
            break
        coordinator.prepare(log, conns, spec.load_id, job(spark, load, conns))
        assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING
        coordinator.commit(log, conns, spec.load_id)
    assert outcomes.count(State.ABORTED) == 1 and State.COMMITTED in outcomes

    assert_exactly_once(events, kafka_bootstrap, pg_dsn, produced)
    committed = {x.load_id for x in log.recent(100, events["pipeline"]) if x.state == State.COMMITTED}

    # `show` names the load's range, and `show` and `status` the source's lag now: nothing left.
    last = max(committed, key=lambda lid: log.get(lid).began_at)
    shown = subprocess.run([sys.executable, "-m", "twophase", "show", last, "--json"], capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["source"].startswith(f"kafka:default/{events['source']}#{events['pipeline']}: ")
    assert json.loads(shown.stdout)["source_lag"] == 0
    status = subprocess.run([sys.executable, "-m", "twophase", "status", "--pipeline", events["pipeline"]],
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert f"source kafka:default/{events['source']}#{events['pipeline']}: 0 behind" in status.stdout


def test_a_load_without_a_kafka_target_shows_its_end_in_the_group_once_committed(spark, events, kafka_bootstrap,
                                                                                   pg_dsn, conns):
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(12):
        producer.produce(events["source"], json.dumps({"event_id": f"e{n}", "customer_id": "c1", "amount": n}),
                         partition=n % 3)
    producer.flush(30)
    log, source = PostgresLog(pg_dsn), KafkaSource(events["source"], group=events["pipeline"])
    spec = spec_for(events, "run-1", source, all_targets=False)
    load = coordinator.begin(log, spec, conns)
    coordinator.prepare(log, conns, spec.load_id, job(spark, load, conns))
    assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING
    assert group_offsets(kafka_bootstrap, events["pipeline"], events["source"]) == {p: -1001 for p in range(3)}
    coordinator.commit(log, conns, spec.load_id)
    assert group_offsets(kafka_bootstrap, events["pipeline"], events["source"]) == ends(load) == {0: 4, 1: 4, 2: 4}
    for n in range(5):
        producer.produce(events["source"], json.dumps({"event_id": f"late{n}"}), partition=n % 3)
    producer.flush(30)
    status = subprocess.run([sys.executable, "-m", "twophase", "status", "--pipeline", events["pipeline"]],
                            capture_output=True, text=True, timeout=120)
    assert f"source {source.key}: 5 behind" in status.stdout, status.stdout + status.stderr


def test_the_streaming_jobs_records_are_each_totalled_or_rejected_with_its_reason_and_kept(spark, events, pg_dsn,
                                                                                              conns):
    """spark_jobs/orders_stream_totals.py through the job frame in a kept session
    (twophase.spark.job.prepare): orders totalled per customer, every other record counted
    by reason and kept in the quarantine with where it was on the topic."""
    import orders_stream_totals
    from twophase.spark import job as frame

    table = f"{events['table']}_totals"
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"create table {table} (customer_id text, orders int, revenue numeric(14, 2), "
                    "first_order_at timestamptz, last_order_at timestamptz, load_id text not null)")
    good = [("c1", "10.50", "2026-11-27T10:00:00Z"), ("c1", "4.25", "2026-11-27T10:05:00Z"),
            ("c2", "7", "2026-11-27T09:00:00Z")]
    bad = {"not_json": "{not json", "missing_customer": '{"order_id": "o9", "amount": "3"}',
           "amount_not_positive": '{"order_id": "o8", "customer_id": "c3", "amount": "-3", '
                                  '"ordered_at": "2026-11-27T10:00:00Z"}',
           "bad_timestamp": '{"order_id": "o7", "customer_id": "c3", "amount": "2", "ordered_at": "yesterday"}'}
    producer = Producer({"bootstrap.servers": conns.kafka_bootstrap})
    for n, (customer, amount, at) in enumerate(good):
        producer.produce(events["source"], json.dumps({"order_id": f"o{n}", "customer_id": customer, "amount": amount,
                                                       "ordered_at": at}), partition=0)
    for value in bad.values():
        producer.produce(events["source"], value, partition=1)
    producer.flush(30)
    log = PostgresLog(pg_dsn)
    spec = replace(spec_for(events, "run-1", KafkaSource(events["source"], group=events["pipeline"]),
                            all_targets=False), targets=(PostgresTarget(table),))
    coordinator.begin(log, spec, conns)
    frame.prepare(spark, orders_stream_totals.build, spec.load_id, conns)
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty(), "what the job kept outlives its prepare"
    assert coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(log, conns, spec.load_id)

    assert log.get(spec.load_id).metrics == {"input_lines": 7, "orders": 3, "rejected_lines": 4,
                                             "rejected_by_reason": {reason: 1 for reason in bad}}
    kept = {k.reason: (k.source, k.content) for k in log.quarantined(spec.load_id)}
    assert kept == {reason: (f"partition 1 offset {n}", value) for n, (reason, value) in enumerate(bad.items())}
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select customer_id, orders, revenue::text from {table} order by customer_id")
        assert cur.fetchall() == [("c1", 2, "14.75"), ("c2", 1, "7.00")]


def test_a_file_that_grows_after_begin_fails_its_load_naming_it_and_the_next_load_reads_it(
        spark, events, pg_dsn, conns, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for n in range(2):
        (landing / f"part-{n}.json").write_text("".join(
            json.dumps({"event_id": f"f{n}-{i}", "customer_id": "c1", "amount": i}) + "\n" for i in range(3)))
    log, source = PostgresLog(pg_dsn), FilesSource(landing.as_uri(), "new")

    def lines(load):
        raw = source.frame(spark, Range.from_json(load.source_range), conns)
        event = F.from_json("value", "event_id string, customer_id string, amount int")
        return raw.select(event.alias("e")).select("e.*")

    first = coordinator.begin(log, spec_for(events, "run-1", source), conns)
    with (landing / "part-1.json").open("a") as f:  # still being written after the listing
        f.write(json.dumps({"event_id": "f1-late", "customer_id": "c1", "amount": 9}) + "\n")
    with pytest.raises(SourceError, match=r"the input changed while the load read it: file://\S+part-1.json "
                                          r"changed after the load listed it"):
        coordinator.prepare(log, conns, first.load_id, lines(first))
    assert coordinator.vote(log, conns, first.load_id).state == State.ABORTING
    coordinator.rollback(log, conns, first.load_id)

    second = coordinator.begin(log, spec_for(events, "run-2", source), conns)
    assert Range.from_json(second.source_range).records == 2  # both files again, the grown one whole
    coordinator.prepare(log, conns, second.load_id, lines(second))
    assert coordinator.vote(log, conns, second.load_id).state == State.COMMITTING
    coordinator.commit(log, conns, second.load_id)
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select count(*) from {events['table']} where load_id = %s", (second.load_id,))
        assert cur.fetchone()[0] == 7
