"""A Spark home for the many short-lived Spark drivers of the test suite: the virtualenv's
Spark, started on about half the CPU. `scripts/stack spark-home` makes it once per machine
(~40 s; in the machine's cache, settings.machine_cache(), so a fresh clone finds it made)
and prints the two lines that select it (scripts/test evaluates them):

- SPARK_HOME: the installed Spark's bin/ and jars/ (the jars hard-linked), without
  python/lib/. Spark puts its Python sources there as zips (pyspark.zip, py4j) ahead of
  everything on the PYTHONPATH of a driver and its Python workers, and Python compiles
  modules of a zip from source in every process; without them, they import the very same
  package from the virtualenv, compiled once by scripts/install.
- TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS, plus a class-data archive of what a driver JVM
  loads (-XX:SharedArchiveFile): the JVM maps those classes instead of reading, verifying
  and parsing thousands of them again (a tiny job: 14 CPU-s without it, 7 with it, on
  this stack's JDK 17). Made by a small job run with -XX:ArchiveClassesAtExit. A home is
  named after the JDK and Spark's jars (names and sizes): another JDK or Spark gets a home
  of its own. A JVM that cannot use the archive starts without it (-Xshare:auto, the
  default); tests/stack/test_spark_home.py checks that it does use it.

Nothing of a load's result depends on either. Users' Spark (scripts/demo, Airflow of the
stack, docker-compose.yml) is the installed one as it is.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import subprocess
import sys
import shutil
import tempfile
import time
from pathlib import Path

from .proc import StackError
from .settings import machine_cache, venv_bin

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


def installed() -> Path:
    """The virtualenv's Spark (scripts/stack runs in the virtualenv): the pyspark package
    (bin/, jars/, python/lib/*.zip)."""
    import pyspark

    return Path(pyspark.__file__).parent


ARCHIVE = "driver-classes.jsa"
UNUSED_FOR = 30 * 86400  # a home of another JDK or Spark, unused this long, is deleted (170 MB)


def ensure() -> dict[str, str]:
    """The home of this JDK and Spark, made first when missing (one maker at a time; others
    wait for it); the environment that selects it."""
    spark = installed()
    homes = machine_cache() / "spark-home"
    homes.mkdir(parents=True, exist_ok=True)
    key = _key(spark)
    home = homes / key
    with open(homes / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / ARCHIVE).exists():
            _make(home, spark)
        os.utime(home)  # its last use
    _forget_unused(homes, home)
    options = driver_options_without_archive()  # evaluated twice, it says the archive once
    return {"SPARK_HOME": str(home),
            "TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS": f"{options} -XX:SharedArchiveFile={home / ARCHIVE}".strip()}


def driver_options_without_archive() -> str:
    """TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS without its class archive: the options of a JVM
    that has not this home's classes (an executor, the JVM making the archive)."""
    return " ".join(o for o in os.environ.get("TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS", "").split()
                    if not o.startswith("-XX:SharedArchiveFile="))


def _make(home: Path, spark: Path) -> None:
    """bin/ and jars/ of the installed Spark (hard links where the file system allows), then
    the archive, last: a home without one is left half-made and is made again. The archive
    is made in place, as it names the jars by path."""
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    shutil.copytree(spark / "bin", home / "bin")
    shutil.copytree(spark / "jars", home / "jars", copy_function=_link_or_copy)
    _make_archive(home, home / ARCHIVE)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copy2(source, target)  # with its time: the JVM checks each jar's against the archive


def _forget_unused(homes: Path, current: Path) -> None:
    for other in homes.iterdir():
        if other.is_dir() and other != current and time.time() - other.stat().st_mtime > UNUSED_FOR:
            with open(homes / f"{other.name}.lock", "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # in use or being made
                shutil.rmtree(other, ignore_errors=True)
            (homes / f"{other.name}.lock").unlink(missing_ok=True)


def _key(spark: Path) -> str:
    """The JDK and Spark's jars: what a driver JVM's class path and classes are."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    key = hashlib.sha256(subprocess.run([java, "-version"], capture_output=True, text=True).stderr.encode())
    key.update(str(Path(shutil.which(java) or java).resolve()).encode())
    for jar in sorted((spark / "jars").rglob("*.jar")):
        key.update(f"{jar.relative_to(spark)} {jar.stat().st_size}".encode())
    return key.hexdigest()[:16]


def _make_archive(home: Path, path: Path) -> None:
    print("stack: making the Spark driver's class archive (first time: ~40 s)", file=sys.stderr, flush=True)
    java_options = driver_options_without_archive()
    with tempfile.TemporaryDirectory(prefix="twophase-classes-") as work:
        job, made = Path(work) / "job.py", Path(work) / "classes.jsa"
        job.write_text(JOB)
        cmd = [str(home / "bin" / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", f"spark.driver.extraJavaOptions={java_options} -XX:ArchiveClassesAtExit={made}",
               str(job), work]
        python = str(venv_bin() / "python")
        env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
        if proc.returncode != 0 or not made.exists():
            raise StackError(f"making the Spark class archive failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        os.replace(made, path)  # whole or not at all: a JVM never maps a half-written archive


def export_lines() -> str:
    return "\n".join(f"export {key}={shlex.quote(value)}" for key, value in ensure().items())
