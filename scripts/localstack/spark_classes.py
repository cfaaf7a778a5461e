"""An archive of the classes a Spark driver JVM loads (the JDK's class data sharing), so
that each spark-submit and each Spark session of the tests starts on about half the CPU:
its JVM maps the classes from the archive instead of reading, verifying and parsing
thousands of them again (a tiny job: 14 CPU-s without it, 7 with it, on this stack's JDK 17).

`scripts/stack spark-classes` makes the archive once (a small job run with
-XX:ArchiveClassesAtExit, ~40 s) and prints the JVM option that uses it; scripts/test puts
that option into TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS. The archive is named after the JDK
and Spark's jars, so another JDK or Spark version makes a new one; a JVM that cannot use
an archive starts without it and changes no result (-Xshare:auto, the default).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .proc import StackError
from .settings import stack_dir, venv_bin

# What the archive is made from: a job that goes through what a load's driver does (a
# session, JSON lines read, Arrow batches through Python, a shuffle, Parquet out, a collect).
JOB = '''
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.appName("twophase-class-archive").getOrCreate()
spark.sparkContext.setLogLevel("WARN")
folder = sys.argv[1]
spark.createDataFrame([(i % 7, float(i), f"c{i}") for i in range(500)], "k int, v double, s string") \\
    .write.mode("overwrite").json(folder + "/lines")
frame = spark.read.schema("k int, v double, s string").json(folder + "/lines")
frame = frame.mapInArrow(lambda batches: (b for b in batches), frame.schema)
totals = frame.groupBy("k").agg(F.sum("v").alias("v"), F.count(F.lit(1)).alias("n"))
totals.write.mode("overwrite").parquet(folder + "/totals")
assert len(spark.read.parquet(folder + "/totals").collect()) == 7
spark.stop()
'''


def _java_version(java: str) -> str:
    proc = subprocess.run([java, "-version"], capture_output=True, text=True)
    return proc.stderr.strip()


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def archive() -> Path:
    """Where the archive for this JDK and these Spark jars lives."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    key = hashlib.sha256(_java_version(java).encode())
    for jar in sorted(_spark_jars().glob("*.jar")):
        key.update(jar.name.encode())
    return stack_dir() / "spark" / f"driver-classes-{key.hexdigest()[:16]}.jsa"


def option(path: Path) -> str:
    return f"-XX:SharedArchiveFile={path}"


def ensure() -> Path:
    """The archive, made first when missing (one maker at a time; others wait for it)."""
    path = archive()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / "archive.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            _make(path)
    return path


def _make(path: Path) -> None:
    print("stack: making the Spark driver's class archive (first time: ~40 s)", file=sys.stderr, flush=True)
    java_options = os.environ.get("TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS", "")
    with tempfile.TemporaryDirectory(prefix="twophase-classes-") as work:
        job, made = Path(work) / "job.py", Path(work) / "classes.jsa"
        job.write_text(JOB)
        cmd = [str(venv_bin() / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", f"spark.driver.extraJavaOptions={java_options} -XX:ArchiveClassesAtExit={made}",
               str(job), work]
        env = {**os.environ, "PYSPARK_PYTHON": str(venv_bin() / "python"),
               "PYSPARK_DRIVER_PYTHON": str(venv_bin() / "python")}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
        if proc.returncode != 0 or not made.exists():
            raise StackError(f"making the Spark class archive failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        os.replace(made, path)  # whole or not at all: a JVM never maps a half-written archive
