"""Executors whose Python lacks a package the load's writers need: prepare fails before
staging, with one line naming the package, the host and the Python, recorded as the load's
prepare error.

The executors' Python comes from the Spark configuration (`spark.pyspark.python`), as on a
cluster: here a wrapper of the project's interpreter that cannot import confluent_kafka (a
sitecustomize that refuses it, user site off). The driver keeps the full interpreter
(`spark.pyspark.driver.python`). The job finds its connections file the way a cluster-mode
driver does: not at the path it is given, but in Spark's copy of --files (SparkFiles).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from support import jvm_confs, make_spec
from twophase.connections import CONNECTIONS_FILE
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spark.executors import FIX

JOB = Path(__file__).parent / "tiny_prepare.py"

BLOCKER = '''import sys


class _Refused:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "confluent_kafka":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, _Refused())
'''


def python_without_confluent_kafka(folder: Path) -> Path:
    (folder / "blocked").mkdir()
    (folder / "blocked" / "sitecustomize.py").write_text(BLOCKER)
    wrapper = folder / "python"
    wrapper.write_text(f'#!/bin/sh\nexport PYTHONNOUSERSITE=1\n'
                       f'export PYTHONPATH="{folder / "blocked"}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_executors_without_confluent_kafka_fail_prepare_naming_it(tmp_path, txlog, conns, target):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    shipped = tmp_path / CONNECTIONS_FILE
    conns.to_file(shipped)
    executor_python = python_without_confluent_kafka(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    workdir = tmp_path / "driver"  # not where the file is: the driver must find Spark's copy
    workdir.mkdir()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
         "--conf", f"spark.pyspark.python={executor_python}", "--conf", f"spark.pyspark.driver.python={sys.executable}",
         "--conf", "spark.ui.enabled=false", *jvm_confs(), "--files", str(shipped), str(JOB), "--load-id", spec.load_id,
         "--connections-file", f"/nowhere/{CONNECTIONS_FILE}"],
        capture_output=True, text=True, timeout=600, env=env, cwd=workdir)
    assert proc.returncode != 0, proc.stdout[-3000:]

    load = txlog.get(spec.load_id)
    assert load.state == State.PREPARING
    python = re.escape(sys.executable)
    assert re.fullmatch(rf"ExecutorPackagesMissing: executors on host {re.escape(socket.gethostname())} "
                        rf"\(python {python} 3\.\d+\.\d+\) lack confluent_kafka, needed by the kafka participant: "
                        rf"{re.escape(FIX)}", load.prepare_error), load.prepare_error
    assert "prepare failed: ExecutorPackagesMissing" in proc.stdout  # the task log's line
    assert "job metrics" not in proc.stdout  # failed before the job's own code ran

    decided = coordinator.vote(txlog, conns, spec.load_id)
    assert decided.reason == f"prepare failed: {load.prepare_error}"
    coordinator.rollback(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTED
