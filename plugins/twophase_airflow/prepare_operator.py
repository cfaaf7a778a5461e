"""The prepare task: spark-submit of the pipeline's job inside the twophase frame.

A SparkSubmitOperator that adds what the frame (twophase.spark.job.run) needs:

- `--load-id`, derived from the DAG run like every other task of the load;
- the servers of every target, from the Airflow connections, in a connections file
  (Connections.to_file: mode 0600, in a temporary folder removed after the run) shipped with
  `--files`; only its path is on the command line (`--connections-file`), never a secret,
  and spark-submit's environment keeps no variable that holds one (docs/clusters.md,
  "Secrets on clusters");
- the Spark settings of the Spark connection's extra, under the operator's own `conf`
  (two_phase_load's spark_conf), with Spark's own log at WARN unless they say otherwise,
  and among them the executors' Python
  (`spark.pyspark.python`): PYSPARK_PYTHON and
  PYSPARK_DRIVER_PYTHON of the Airflow host are never passed on. When the driver runs here
  (local master, client mode) and no driver Python is set, it is this task's own;
- the twophase package as a --py-files zip, so executors on a cluster can import it
  (with its Java sources, which its Spark functions compile on the driver).

Standalone cluster deploy mode is refused before submitting: Spark cannot run a Python
application that way.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from functools import partial
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

import twophase
from twophase import ids
from twophase.connections import CONNECTIONS_FILE
from twophase.spec import SpecError

from .config import LoadConfig
from .connections import SparkSubmit, from_airflow, secrets_of, spark_submit

# The host's interpreters: never passed to spark-submit (the Spark settings name them).
_HOST_PYTHON = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")


def package_zip(folder: Path) -> Path:
    """twophase/ as a zip for --py-files (rebuilt per run: it is small), with the Java
    sources its Spark functions compile on the driver (twophase.spark.java_functions)."""
    source = Path(twophase.__file__).parent
    target = folder / "twophase.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted([*source.rglob("*.py"), *source.rglob("*.java")]):
            zf.write(path, Path("twophase") / path.relative_to(source))
    return target


def refuse_standalone_cluster(submit: SparkSubmit) -> None:
    if submit.master.startswith("spark://") and submit.deploy_mode == "cluster":
        raise SpecError(f"the Spark connection's master {submit.master} with deploy mode cluster cannot run prepare: "
                        "Spark's standalone cluster deploy mode does not run Python applications; use deploy "
                        "mode client on a standalone master (the driver runs on the Airflow worker), or YARN or "
                        "Kubernetes for cluster mode (docs/clusters.md)")


def spark_conf(submit: SparkSubmit, own: dict | None) -> dict:
    """The connection's Spark settings, then the operator's own `conf` over them. Unset,
    the Python of a driver (or, local master, executors) on this host is this task's, and
    Spark logs warnings and errors only (`spark.log.level`: its INFO lines, some 450 per
    run, buried the job's own; set it to INFO to see them)."""
    conf = {**submit.conf, **(own or {})}
    conf.setdefault("spark.log.level", "WARN")
    if submit.driver_here:
        conf.setdefault("spark.pyspark.driver.python", sys.executable)
    if submit.master.startswith("local"):
        conf.setdefault("spark.pyspark.python", sys.executable)  # the executors run here, too
    return conf


def submit_environment(secrets: set[str]) -> dict[str, str]:
    """This process's environment without the host's Python settings and without any
    variable holding a connection's secret (the stack's AIRFLOW_CONN_*, a DSN...)."""
    secrets = {secret for secret in secrets if len(secret) >= 5}  # as Airflow's masker: "a" is in PATH
    return {name: value for name, value in os.environ.items()
            if name not in _HOST_PYTHON and not any(secret in value for secret in secrets)}


class TwoPhasePrepareOperator(SparkSubmitOperator):
    def __init__(self, *, load: LoadConfig, pipeline: str, **kwargs):
        kwargs.setdefault("conn_id", load.spark_conn_id)
        super().__init__(**kwargs)
        self.load, self.pipeline = load, pipeline

    def execute(self, context):
        submit = spark_submit(self._conn_id, self._deploy_mode)
        refuse_standalone_cluster(submit)
        load_id = ids.load_id_for(self.pipeline, context["run_id"])
        conns = from_airflow(self.load.log_conn_id, self.load.conn_ids())
        self.conf = spark_conf(submit, self.conf)
        self.log.info("preparing load %s: spark-submit %s", load_id, self.application)
        with tempfile.TemporaryDirectory(prefix="twophase-") as folder:  # mode 0700
            connections = Path(folder) / CONNECTIONS_FILE
            conns.to_file(connections)
            zipped = str(package_zip(Path(folder)))
            self.py_files = f"{self.py_files},{zipped}" if self.py_files else zipped
            self.files = f"{self.files},{connections}" if self.files else str(connections)
            self.application_args = [*(self.application_args or []), "--load-id", load_id,
                                     "--connections-file", str(connections)]
            self._hook = self._get_hook()
            # The hook's Popen takes its environment from here (unless env_vars are set).
            self._hook.submit = partial(self._hook.submit, env=submit_environment(secrets_of(conns)))
            return super().execute(context)
