"""The stack playing a cluster (scripts/stack cluster): real servers, nothing mocked.

- Spark: a job in client mode against the standalone master runs on the worker's own
  virtualenv, in a folder outside the checkout, and its executors cannot see the checkout.
- Kafka: three brokers replicate a topic three times; with one broker killed (SIGKILL) a
  transactional producer still commits and a read_committed consumer reads it; then
  `scripts/stack cluster up` brings the broker back.

Run with the cluster up: `scripts/stack cluster up; eval "$(scripts/stack env)"` (scripts/test
does both).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from support import jvm_confs, localstack

ROOT = Path(__file__).resolve().parents[2]


def _required_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run `scripts/stack cluster up` and eval \"$(scripts/stack env)\" first")
    return value


def _kafka_cluster_module():
    """The stack's own code for the three brokers (their pid files), as scripts/stack runs it."""
    return localstack("kafka_cluster")


# Submitted with spark-submit (client mode), as Airflow's operator does: a SparkSession of
# its own, never the suite's local one. spark.pyspark.python is honoured by spark-submit
# (it sets the driver's PYSPARK_PYTHON from it); a SparkSession built in a plain Python
# process reads only the PYSPARK_PYTHON environment variable.
PROBE_JOB = r"""
import json, sys
from pyspark.sql import SparkSession

checkout = sys.argv[1]
spark = SparkSession.builder.appName("cluster-stack-probe").getOrCreate()


def probe(_):
    import importlib, os, socket, sys
    modules = {}
    for name in ("pyarrow", "psycopg2", "confluent_kafka", "pyiceberg"):
        try:
            modules[name] = importlib.import_module(name).__file__
        except ImportError as exc:
            modules[name] = f"missing: {exc}"
    return {
        "python": sys.executable, "host": socket.gethostname(), "cwd": os.getcwd(),
        "sees_checkout": os.path.exists(os.path.join(checkout, "README.md")),
        "env": {k: os.environ.get(k) for k in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON")},
        "modules": modules,
    }


print("PROBE " + json.dumps(spark.sparkContext.parallelize(range(4), 4).map(probe).collect()))
spark.stop()
"""


@pytest.mark.cluster
@pytest.mark.usefixtures("stack_cluster")
def test_executors_run_the_workers_own_python_and_cannot_see_the_checkout(tmp_path):
    master = _required_env("TWOPHASE_CLUSTER_SPARK_MASTER")
    executor_python = _required_env("TWOPHASE_CLUSTER_EXECUTOR_PYTHON")
    assert not Path(executor_python).is_relative_to(ROOT)
    job = tmp_path / "probe.py"
    job.write_text(PROBE_JOB)
    # The driver's environment names the checkout's Python (as the stack's env does):
    # spark.pyspark.python must win on the executors all the same.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", master, "--deploy-mode", "client",
              "--conf", f"spark.pyspark.python={executor_python}",
              "--conf", f"spark.pyspark.driver.python={sys.executable}",
              "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=512m",
              "--conf", "spark.cores.max=2", "--conf", "spark.ui.enabled=false", *jvm_confs(),
              str(job), str(ROOT)]
    proc = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=180)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert proc.returncode == 0 and line, proc.stdout[-2000:] + proc.stderr[-4000:]
    reports = json.loads(line.removeprefix("PROBE "))

    assert len(reports) == 4
    for report in reports:
        assert report["python"] == executor_python, report
        cwd = Path(report["cwd"])
        assert not cwd.is_relative_to(ROOT) and "/work/app-" in str(cwd), report
        assert report["sees_checkout"] is False, report
        assert report["env"]["VIRTUAL_ENV"] is None and report["env"]["PYSPARK_PYTHON"] is None, report
        assert str(ROOT) not in (report["env"]["PYTHONPATH"] or ""), report
        venv = Path(executor_python).parents[1]
        for name, where in report["modules"].items():
            assert where.startswith(str(venv)), f"{name} on the executor: {where}"


def _isr_counts(admin: AdminClient, topic: str) -> list[int]:
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return [len(p.isrs) for _, p in sorted(partitions.items())]


def _wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s")
        time.sleep(0.5)


@pytest.mark.cluster
@pytest.mark.usefixtures("stack_cluster")
def test_three_brokers_replicate_and_survive_one_killed():
    bootstrap = _required_env("TWOPHASE_CLUSTER_KAFKA_BOOTSTRAP")
    kafka_cluster = _kafka_cluster_module()
    assert kafka_cluster.bootstrap() == bootstrap, "the environment and the stack name different brokers"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"cluster-stack-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    _wait_for(lambda: _isr_counts(admin, topic) == [3, 3, 3], 30, "3 in-sync replicas per partition")

    # Kill the leader of partition 0 (the broker whose port it advertises).
    metadata = admin.list_topics(topic, timeout=10)
    leader_port = int(metadata.brokers[metadata.topics[topic].partitions[0].leader].port)
    victim = next(n for n in kafka_cluster.pids() if kafka_cluster.broker_port(n) == leader_port)
    pid = kafka_cluster.pids()[victim]
    assert pid is not None
    try:
        os.kill(pid, signal.SIGKILL)
        _wait_for(lambda: kafka_cluster.pids()[victim] is None, 10, f"broker {victim} gone after SIGKILL")

        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx",
                             "enable.idempotence": True, "acks": "all"})
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(300):
            producer.produce(topic, key=str(i), value=f"record {i}")
        producer.commit_transaction(60)

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe([topic])
        values = set()
        deadline = time.monotonic() + 60
        while len(values) < 300 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                values.add(msg.value().decode())
        consumer.close()
        assert values == {f"record {i}" for i in range(300)}
    finally:
        up = subprocess.run([str(ROOT / "scripts" / "stack"), "cluster", "up"],
                            capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    assert re.search(rf"starting Kafka cluster node {victim}\b", up.stdout), up.stdout
    assert all(p is not None for p in kafka_cluster.pids().values())
    _wait_for(lambda: _isr_counts(admin, topic) == [3, 3, 3], 30, "the restarted broker back in sync")
    admin.delete_topics([topic])


@pytest.mark.serverless
def test_executor_requirements_pin_what_requirements_txt_pins():
    def pins(path: Path) -> dict[str, str]:
        lines = (ln.split("#")[0].strip() for ln in path.read_text().splitlines())
        return dict(ln.split("==", 1) for ln in lines if "==" in ln)

    project = pins(ROOT / "requirements.txt")
    executor = pins(ROOT / "requirements-executor.txt")
    direct = pins(ROOT / "requirements-executor.in")
    assert {"pyspark", "pyarrow", "psycopg2-binary", "confluent-kafka", "pyiceberg"} <= direct.keys()
    assert direct.items() <= executor.items()
    assert {name: (version, project.get(name)) for name, version in executor.items()
            if project.get(name) != version} == {}
