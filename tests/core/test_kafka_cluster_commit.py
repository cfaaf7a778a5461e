"""A load into the stack's three-broker Kafka cluster survives a broker SIGKILLed mid-copy.

The load's topic has replication factor 3 and min.insync.replicas 2 (docs/clusters.md, "A
replicated Kafka cluster"), beside a Postgres table. The commit copy pauses halfway (the
failpoint kafka.copy_middle with TWOPHASE_FAILPOINT_WAIT); the test SIGKILLs the broker that
leads most of the target topic's partitions, lets the copy go on, and retries the commit the
way the commit task's retries do, with no operator action. The load commits, and independent
readers count every record exactly once and every row.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient

from support import ROOT, count_table_rows, header, localstack, make_df, read_topic
from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spec import LoadSpec

ROWS = 30_000
CLUSTER = "kafka_cluster"  # the named connection of the cluster in this load


def _cluster_bootstrap() -> str:
    bootstrap = os.environ.get("TWOPHASE_CLUSTER_KAFKA_BOOTSTRAP")
    if not bootstrap:
        pytest.fail("TWOPHASE_CLUSTER_KAFKA_BOOTSTRAP is not set: `scripts/stack cluster up` and "
                    "eval \"$(scripts/stack env)\" first (scripts/test does both)")
    return bootstrap


def _busiest_leader(bootstrap: str, topic: str) -> int:
    """The port of the broker that leads most of the topic's partitions."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    leaders = Counter(p.leader for p in metadata.topics[topic].partitions.values())
    return int(metadata.brokers[leaders.most_common(1)[0][0]].port)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.usefixtures("stack_cluster")
def test_a_broker_killed_mid_copy_and_the_load_still_commits_exactly_once(spark, txlog, pg_dsn, target, tmp_path,
                                                                         monkeypatch):
    bootstrap, brokers = _cluster_bootstrap(), localstack("kafka_cluster")
    topic = target["topic"]
    conns = Connections(pg_dsn, "", {CLUSTER: ("kafka", bootstrap)})
    run_id = f"cluster-{topic}"
    spec = LoadSpec(load_id=load_id_for("core_tests", run_id), pipeline="core_tests", run_id=run_id, targets=(
        PostgresTarget(target["table"]),
        KafkaTarget(topic, "customer_id", partitions=3, replication_factor=3,
                    topic_config={"min.insync.replicas": "2"}, connection=CLUSTER)))
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING

    gate = tmp_path / "copy-may-go-on"
    monkeypatch.setenv("TWOPHASE_FAILPOINT", "kafka.copy_middle")
    monkeypatch.setenv("TWOPHASE_FAILPOINT_WAIT", str(gate))
    first: dict = {}

    def commit_once():
        try:
            first["outcomes"] = coordinator.commit(txlog, conns, spec.load_id)
        except Exception as exc:  # noqa: BLE001 - RetryLater is the task's retry; judged below
            first["error"] = exc

    committing = threading.Thread(target=commit_once)
    committing.start()
    victim = None
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "copy-may-go-on.reached").exists():
            assert committing.is_alive() and time.monotonic() < deadline, f"the copy never got halfway: {first}"
            time.sleep(0.1)
        port = _busiest_leader(bootstrap, topic)
        victim = next(n for n in brokers.pids() if brokers.broker_port(n) == port)
        os.kill(brokers.pids()[victim], signal.SIGKILL)
        gate.touch()
        committing.join(timeout=600)
        assert not committing.is_alive(), "the commit hung after the broker died"
        monkeypatch.delenv("TWOPHASE_FAILPOINT")

        retries = 0  # what the commit task's retries do: the same step again, until done
        while txlog.get(spec.load_id).state == State.COMMITTING:
            assert retries < 10, f"still COMMITTING after {retries} retries: {first}"
            retries += 1
            time.sleep(5)
            try:
                coordinator.commit(txlog, conns, spec.load_id)
            except coordinator.RetryLater as exc:
                first.setdefault("retries", []).append(str(exc))
    finally:
        gate.touch()
        committing.join(timeout=600)
        if victim is not None:
            up = subprocess.run([str(ROOT / "scripts" / "stack"), "cluster", "up"], capture_output=True, text=True,
                                timeout=300)
            assert up.returncode == 0, up.stdout + up.stderr

    load = txlog.get(spec.load_id)
    assert load.state == State.COMMITTED, (load.reason, first)
    records = [m for m in read_topic(bootstrap, topic) if header(m, "load_id") == spec.load_id]
    assert len(records) == ROWS, first
    assert len({m.key() for m in records}) == ROWS, "a record was copied twice"
    assert count_table_rows(pg_dsn, target["table"], spec.load_id) == ROWS
