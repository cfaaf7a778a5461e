"""The tests' Spark home (scripts/stack spark-home, scripts/localstack/spark_home.py): made
once; a Spark JVM started from it maps its classes from the archive; a PySpark driver and
its Python workers import pyspark from the virtualenv, not from a zip."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from support import ROOT, stack

JOB = """
import json, sys
import pyspark
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
worker = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()[0]
json.dump({"driver": pyspark.__file__, "worker": worker}, open(sys.argv[1], "w"))
spark.stop()
"""


def _selected() -> dict[str, str]:
    """What `scripts/stack spark-home` exports (shell-quoted values unquoted)."""
    pairs = (line.removeprefix("export ").split("=", 1) for line in stack("spark-home").strip().splitlines())
    return {key: shlex.split(value)[0] for key, value in pairs}


def test_the_home_is_made_once_and_is_what_the_suite_runs_on():
    selected = _selected()
    home = Path(selected["SPARK_HOME"])
    [archive] = [o.removeprefix("-XX:SharedArchiveFile=") for o in selected["TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS"].split()
                 if o.startswith("-XX:SharedArchiveFile=")]
    made_at = Path(archive).stat().st_mtime_ns
    assert _selected() == selected and Path(archive).stat().st_mtime_ns == made_at, "made again"
    assert os.environ["SPARK_HOME"] == str(home), "scripts/test did not select it"
    assert f"-XX:SharedArchiveFile={archive}" in os.environ["TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS"]
    assert (home / "bin" / "spark-class").is_file() and any((home / "jars").glob("spark-core_*.jar"))
    assert not (home / "python").exists(), "the zipped Python sources are back"


def test_a_spark_jvm_of_the_home_loads_its_classes_from_the_archive():
    options = os.environ["TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS"]
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{options} -Xlog:class+load=info"}
    proc = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), "--version"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loads = [line for line in proc.stdout.splitlines() if "[class,load]" in line]
    from_archive = [line for line in loads if "source: shared objects file (top)" in line]
    # Spark's own classes too, not only the JDK's (those come from the JDK's own archive)
    assert any(" org.apache.spark." in line for line in from_archive), loads[:20]
    assert len(from_archive) > len(loads) / 2, f"{len(from_archive)} of {len(loads)} classes from the archive"


def test_a_pyspark_driver_and_its_workers_import_pyspark_from_the_virtualenv(tmp_path):
    job, out = tmp_path / "job.py", tmp_path / "out.json"
    job.write_text(JOB)
    proc = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
                           "--conf", "spark.ui.enabled=false", str(job), str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import pyspark

    found = json.loads(out.read_text())
    assert found == {"driver": pyspark.__file__, "worker": pyspark.__file__}, found
    assert ".zip" not in pyspark.__file__
