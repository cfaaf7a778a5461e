"""Prepare through the real operator (TwoPhasePrepareOperator.execute, spark-submit of a
tiny job through the real frame): no secret of the load's connections on the command line
or in the environment of spark-submit and every process it starts (searched in /proc while
it runs), nor in Spark's event log; the job still reaches Postgres and Kafka (the load
prepares and commits). The executors run the Python the load's Spark settings name, never
the host's PYSPARK_PYTHON. Standalone cluster deploy mode is refused before submitting.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from psycopg2.extensions import parse_dsn

from support import count_table_rows, make_spec
from twophase.connections import CONNECTIONS_FILE
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spec import SpecError
from twophase_airflow import LoadConfig, Table, Topic
from twophase_airflow.connections import SparkSubmit
from twophase_airflow.prepare_operator import TwoPhasePrepareOperator, spark_conf, submit_environment

JOB = Path(__file__).parent / "tiny_prepare.py"
MARK = "TWOPHASE_TEST_EXECUTOR_PYTHON"  # set by the configured executors' Python (a wrapper)


def _descendants(root: int, skip: frozenset[int] = frozenset()) -> set[int]:
    """Every process below `root`, except those in `skip` and below them."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        children = [p for p, parent in parents.items() if parent == pid and p not in found and p not in skip]
        found.update(children)
        todo.extend(children)
    return found


class Watcher(threading.Thread):
    """Reads the command line and environment of every process this test's process started
    since (spark-submit, its JVM, the Python driver, the Python workers), every 0.1 s; and where
    the connections file and Spark's copies of it are, and who may read them."""

    def __init__(self, secret: str):
        super().__init__(daemon=True)
        self.secret, self.stop = secret.encode(), threading.Event()
        # Processes the test run started before (the session's Spark JVM, which has the
        # tests' own environment, secrets included) are not the operator's.
        self.before = frozenset(_descendants(os.getpid()))
        self.processes: dict[int, tuple[list[str], dict[str, str]]] = {}
        self.leaks: list[str] = []
        self.files: dict[str, tuple[int, bool]] = {}  # connections file or copy: (its mode, closed to others)

    def run(self):
        while not self.stop.wait(0.1):
            for pid in _descendants(os.getpid(), skip=self.before):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    environ = Path(f"/proc/{pid}/environ").read_bytes()
                except OSError:
                    continue  # ended meanwhile
                args = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
                env = dict(e.decode(errors="replace").partition("=")[::2] for e in environ.split(b"\0") if e)
                self.processes[pid] = (args, env)
                for where, raw in (("command line", cmdline), ("environment", environ)):
                    if self.secret in raw:
                        self.leaks.append(f"{where} of {' '.join(args)[:200]}")
                if "--connections-file" in args:
                    self._look_at(args[args.index("--connections-file") + 1])
            try:
                copies = list(Path(tempfile.gettempdir()).glob(f"spark-*/userFiles-*/{CONNECTIONS_FILE}"))
            except OSError:  # a Spark folder removed while listed
                continue
            for copy in copies:
                self._look_at(str(copy))

    def _look_at(self, path: str):
        try:  # the file and its folders below /tmp: closed when one of them lets no one else in
            modes = [stat.S_IMODE(p.stat().st_mode) for p in [Path(path), *Path(path).parents][:-2]]
        except OSError:
            return
        self.files[path] = (modes[0], any(m & 0o077 == 0 for m in modes))


def executor_python(folder: Path) -> Path:
    wrapper = folder / "executor-python"
    wrapper.write_text(f'#!/bin/sh\nexport {MARK}=yes\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_no_secret_leaves_the_connections_file_and_the_job_still_reaches_the_servers(
        tmp_path, txlog, conns, target, pg_dsn):
    password = parse_dsn(pg_dsn)["password"]
    assert password and password in os.environ["AIRFLOW_CONN_TWOPHASE_POSTGRES"]  # the test's own env has it
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    events = tmp_path / "events"
    events.mkdir()
    load = LoadConfig(targets=[Table(target["table"]), Topic(target["topic"], key_column="customer_id")],
                      describe_input=lambda interval, params, load_id: {})
    operator = TwoPhasePrepareOperator(  # conf: two_phase_load's spark_conf, over the connection's extra
        task_id="prepare", load=load, pipeline=spec.pipeline, application=str(JOB), name="twophase-secrets-test",
        conf={"spark.pyspark.python": str(executor_python(tmp_path)), "spark.eventLog.enabled": "true",
              "spark.eventLog.dir": events.as_uri(), "spark.eventLog.compress": "false",  # searchable text
              "spark.ui.enabled": "false"})

    watcher = Watcher(password)
    watcher.start()
    try:
        operator.execute({"run_id": spec.run_id})
    finally:
        watcher.stop.set()
        watcher.join()

    # The search saw the processes that matter: spark-submit's JVM, the driver, the executors' Python.
    procs = list(watcher.processes.values())
    submits = [(args, env) for args, env in procs if "org.apache.spark.deploy.SparkSubmit" in args]
    drivers = [args for args, _ in procs if str(JOB) in args and "python" in Path(args[0]).name]
    workers = [env for args, env in procs if "pyspark.daemon" in args or "pyspark.worker" in args]
    assert submits and drivers and workers, [args[:4] for args in procs]
    assert watcher.leaks == []
    for args, env in submits:
        assert "--connections-file" in args and "--files" in args
        assert not {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"} & set(env)  # the host's are not passed on
        assert f"spark.pyspark.python={tmp_path / 'executor-python'}" in args
    assert all(env.get(MARK) == "yes" for env in workers)  # executors ran the configured Python

    # The file and Spark's copies were closed to other users, and the file is gone.
    [given] = [p for p in watcher.files if Path(p).parent.name.startswith("twophase-")]
    assert watcher.files[given] == (0o600, True)
    assert len(watcher.files) > 1 and all(closed for _, closed in watcher.files.values()), watcher.files
    assert not Path(given).exists() and not Path(given).parent.exists()

    logs = [p for p in events.rglob("*") if p.is_file()]
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    assert "SparkListenerEnvironmentUpdate" in text and "spark.pyspark.python" in text  # the settings are there
    assert password not in text

    # The job reached the servers through the file: prepared, then commits with every row.
    assert txlog.get(spec.load_id).state == State.PREPARED
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.COMMITTED
    assert count_table_rows(pg_dsn, target["table"], spec.load_id) == 20


def test_standalone_cluster_deploy_mode_is_refused_before_submitting(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE_CLUSTER", json.dumps({
        "conn_type": "spark", "host": "spark://127.0.0.1", "port": 57077, "extra": {"deploy-mode": "cluster"}}))
    load = LoadConfig(targets=[Table("core_tests.t")], describe_input=lambda interval, params, load_id: {},
                      spark_conn_id="spark_standalone_cluster")
    operator = TwoPhasePrepareOperator(task_id="prepare", load=load, pipeline="core_tests", application=str(JOB))
    with pytest.raises(SpecError) as refused:
        operator.execute({"run_id": "refused"})
    assert str(refused.value) == (
        "the Spark connection's master spark://127.0.0.1:57077 with deploy mode cluster cannot run prepare: Spark's "
        "standalone cluster deploy mode does not run Python applications; use deploy mode client on a standalone "
        "master (the driver runs on the Airflow worker), or YARN or Kubernetes for cluster mode (docs/clusters.md)")
    assert operator._hook is None  # nothing was submitted
    assert re.fullmatch(r"[^\n]+", str(refused.value))


def test_the_executors_python_comes_from_the_spark_settings_never_from_the_host(monkeypatch):
    cluster = SparkSubmit("spark://10.0.0.5:7077", "client", {"spark.pyspark.python": "/opt/venv/bin/python"})
    assert spark_conf(cluster, {"spark.executor.memory": "2g"}) == {
        "spark.pyspark.python": "/opt/venv/bin/python", "spark.executor.memory": "2g",
        "spark.pyspark.driver.python": sys.executable,  # the driver runs here, in client mode
        "spark.log.level": "WARN"}
    yarn = SparkSubmit("yarn", "cluster", {"spark.log.level": "INFO"})
    assert spark_conf(yarn, {"spark.pyspark.python": "./env/bin/python"}) == {
        "spark.pyspark.python": "./env/bin/python", "spark.log.level": "INFO"}
    local = SparkSubmit("local[*]", "client", {})
    assert spark_conf(local, None) == {"spark.pyspark.python": sys.executable,
                                       "spark.pyspark.driver.python": sys.executable, "spark.log.level": "WARN"}

    monkeypatch.setenv("PYSPARK_PYTHON", "/home/airflow/.venv/bin/python")
    monkeypatch.setenv("SOME_URL", "postgresql://u:s3cret-pw@db/x")
    monkeypatch.setenv("HARMLESS", "a value")
    env = submit_environment({"s3cret-pw", "a"})  # "a": too short to tell a secret from PATH
    assert "PYSPARK_PYTHON" not in env and "SOME_URL" not in env
    assert env["HARMLESS"] == "a value" and env["PATH"] == os.environ["PATH"]
