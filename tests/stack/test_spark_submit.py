"""spark-submit from the virtualenv runs a PySpark job through Airflow's Spark connection."""

import json
import os
from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

JOB = Path(__file__).parents[2] / "spark_jobs" / "stack_check.py"


def test_spark_submit_through_the_airflow_connection(tmp_path):
    out = tmp_path / "result.json"
    hook = SparkSubmitHook(conn_id="spark_default", application_args=["1000", str(out)], name="stack-smoke")
    hook.submit(str(JOB))
    result = json.loads(out.read_text())
    assert result == {"total": 500500, "master": os.environ.get("TWOPHASE_SPARK_MASTER") or "local[*]"}
