"""The prepare task: spark-submit of the pipeline's job inside the twophase frame.

A SparkSubmitOperator that adds what the frame (twophase.spark_job.run) needs:
`--load-id` (derived from the DAG run, like every other task of the load), the servers
of every target from the Airflow connections as environment variables of spark-submit
(Connections.to_env; never on its command line, never rendered in the UI), and the twophase package as a --py-files zip
so executors on a cluster can import it.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

import twophase
from twophase import ids

from .config import LoadConfig
from .connections import from_airflow


def package_zip(folder: Path) -> Path:
    """twophase/ as a zip for --py-files (rebuilt per run: it is small)."""
    source = Path(twophase.__file__).parent
    target = folder / "twophase.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source.rglob("*.py")):
            zf.write(path, Path("twophase") / path.relative_to(source))
    return target


class TwoPhasePrepareOperator(SparkSubmitOperator):
    def __init__(self, *, load: LoadConfig, pipeline: str, **kwargs):
        kwargs.setdefault("conn_id", load.spark_conn_id)
        super().__init__(**kwargs)
        self.load, self.pipeline = load, pipeline

    def execute(self, context):
        load_id = ids.load_id_for(self.pipeline, context["run_id"])
        conns = from_airflow(self.load.log_conn_id, self.load.conn_ids())
        self.application_args = [*(self.application_args or []), "--load-id", load_id]
        self.env_vars = {**(self.env_vars or {}), **conns.to_env()}
        self.log.info("preparing load %s: spark-submit %s", load_id, self.application)
        with tempfile.TemporaryDirectory(prefix="twophase-") as folder:
            zipped = str(package_zip(Path(folder)))
            self.py_files = f"{self.py_files},{zipped}" if self.py_files else zipped
            return super().execute(context)
