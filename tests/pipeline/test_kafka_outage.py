"""Kafka down at prepare: the run fails, the rollback retries with one readable line and
succeeds once the broker is back.

A real DAG run (`airflow dags test` of the example pipeline) against the stack's Postgres
and a throwaway one-node Kafka that this test starts in its own folder and ports (the
stack's own code, scripts/localstack/kafka.py), so the shared broker is never touched.
The run's Kafka connection points at it. The broker is stopped before the run and started
again as soon as the first rollback attempt has failed (seen in the run's output), while
Airflow waits out the rollback's retry delay; it is stopped at the end whatever happens.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from orders_sample.generate import generate
from support import ORDERS_PIPELINE, read_topic
from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.protocol.states import State
from support import count_table_rows

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TABLE, TOPIC = "analytics.customer_daily_totals", "customer-daily-totals"
RETRY_MARK = "new_state=up_for_retry"  # Airflow's line when a task attempt failed and will be retried


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThrowawayKafka:
    """The stack's Kafka code, pointed at its own folder and ports by the environment it
    reads (TWOPHASE_STACK_DIR, TWOPHASE_KAFKA_PORT, TWOPHASE_KAFKA_CONTROLLER_PORT), set
    only while it runs, so the DAG run and other tests keep the stack's."""

    def __init__(self, folder: Path):
        sys.path.insert(0, str(ROOT / "scripts"))
        try:
            from localstack import kafka
        finally:
            sys.path.remove(str(ROOT / "scripts"))
        self._kafka, self.folder = kafka, folder
        self.port, self.controller_port = _free_port(), _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        # The broker's jars: the stack's own (fetched once with Maven), shared read-only.
        (folder / "kafka").mkdir(parents=True)
        (folder / "kafka" / "libs").symlink_to(kafka.libs())

    @contextmanager
    def _env(self):
        names = {"TWOPHASE_STACK_DIR": str(self.folder), "TWOPHASE_KAFKA_PORT": str(self.port),
                 "TWOPHASE_KAFKA_CONTROLLER_PORT": str(self.controller_port)}
        saved = {k: os.environ.get(k) for k in names}
        os.environ.update(names)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def up(self) -> None:
        with self._env():
            self._kafka.up()

    def down(self) -> None:
        with self._env():
            self._kafka.down()

    def status(self) -> str:
        with self._env():
            return self._kafka.status()


@pytest.fixture
def own_kafka(tmp_path):
    broker = ThrowawayKafka(tmp_path / "stack")
    try:
        broker.up()  # formats its storage and proves it works, so the restart below is quick
        yield broker
    finally:
        broker.down()
        assert broker.status() == "down"


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _run_restarting_kafka(conf: dict, env: dict, broker: ThrowawayKafka) -> tuple[str, tuple[str, str]]:
    """`airflow dags test`, its output read as it comes; when the first rollback attempt
    has failed, start the broker (Airflow waits the retry delay, 30 s, before the next).
    Returns the output, and the run's id and final state."""
    proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "dags", "test", ORDERS_PIPELINE,
                             "-c", json.dumps(conf)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    rollback_failed = threading.Event()

    def read():
        task = None
        for line in proc.stdout:
            lines.append(line)
            started = re.search(r"\[DAG TEST\] starting task_id=(\w+) ", line)
            task = started.group(1) if started else task
            if task == "rollback" and RETRY_MARK in line:
                rollback_failed.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert rollback_failed.wait(600), "no rollback attempt failed:\n" + "".join(lines)[-5000:]
        broker.up()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(30)
    output = "".join(lines)
    finished = re.findall(r"DagRun Finished: .*? run_id=(\S+), .*? state=(\w+)", output)
    assert finished, f"the DAG run did not finish (exit {proc.returncode}):\n{output[-4000:]}"
    return output, finished[-1]


def test_kafka_down_at_prepare_rollback_retries_then_succeeds(own_kafka, orders_data, fresh_day, pg_dsn):
    landing = orders_data / "landing"
    generate(landing, fresh_day, 200, bad_share=0.0)
    before = _snapshot(landing)
    own_kafka.down()
    assert own_kafka.status() == "down"
    env = {**os.environ, "ORDERS_DATA": str(orders_data), "TWOPHASE_KAFKA_BOOTSTRAP": own_kafka.bootstrap,
           "TWOPHASE_KAFKA_TIMEOUT_S": "5",  # each attempt gives up on the broker that is down in seconds
           "TWOPHASE_RETRY_DELAY_S": "30",  # the broker restarts while the rollback waits for its retry
           "AIRFLOW_CONN_TWOPHASE_KAFKA": json.dumps({"conn_type": "kafka",
                                                      "extra": {"bootstrap.servers": own_kafka.bootstrap}})}

    output, (run_id, state) = _run_restarting_kafka({"date": fresh_day.isoformat()}, env, own_kafka)

    assert state == "failed", output[-4000:]
    lid = load_id_for(ORDERS_PIPELINE, run_id)
    txlog = PostgresLog(pg_dsn)
    load = txlog.get(lid)
    down = (f"Kafka at {own_kafka.bootstrap} is unreachable: Connect to ipv4#{own_kafka.bootstrap} failed: "
            "Connection refused")
    # prepare: the root cause, in the log, the vote's reason and the prepare task's log.
    assert load.prepare_error.startswith(f"KafkaUnreachable: {down}"), load.prepare_error
    assert load.reason == f"prepare failed: {load.prepare_error}"
    assert f"prepare failed: KafkaUnreachable: {down}" in output
    # rollback: each failed attempt says why in one readable line, no client traceback; then done.
    attempts = [a.split("[DAG TEST] end task task_id=rollback ")[0]
                for a in output.split("[DAG TEST] starting task_id=rollback ")[1:]]
    failed, last = attempts[:-1], attempts[-1]
    assert failed and all(RETRY_MARK in a for a in failed), output[-5000:]
    for attempt in failed:
        reasons = [line for line in attempt.splitlines() if "kafka: retry later; " in line and down in line]
        assert reasons and all(re.match(r"(twophase_airflow\.errors\.)?RetryTask: rollback of load ", line)
                               for line in reasons), attempt[-3000:]
    assert "ROLLED BACK load" in last and "new_state=success" in last, last[-3000:]
    assert "cimpl.KafkaException" not in output and "KafkaError{" not in output, "a raw Kafka client error"
    # librdkafka's own lines: none raw ("%3|...|FAIL|rdkafka#..."); each client's outage in
    # one line of the twophase.kafka logger (the admin client of prepare, one per attempt).
    assert not re.search(r"\|FAIL\|rdkafka#", output)
    outage_lines = [line for line in output.splitlines() if "twophase.kafka" in line and "Connect to ipv4#" in line]
    assert outage_lines and len(outage_lines) <= 2 * (1 + len(failed)) < 10, "\n".join(outage_lines)
    assert all("failed connection attempts in" in line for line in outage_lines), outage_lines

    assert load.state == State.ABORTED, (load.state, load.reason)
    assert [t.to_state for t in txlog.history(lid)] == ["PREPARING", "ABORTING", "ABORTED"]
    assert count_table_rows(pg_dsn, TABLE, lid) == 0
    assert read_topic(own_kafka.bootstrap, TOPIC, "read_uncommitted") == []
    assert _snapshot(landing) == before, "the landing folder must be untouched"
