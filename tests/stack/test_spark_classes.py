"""The Spark driver's class archive (scripts/stack spark-classes): made once, and a Spark
JVM started with the option it prints maps its classes from it."""

import os
import subprocess
import sys
from pathlib import Path

from support import ROOT, stack


def test_the_archive_is_made_once_and_a_spark_jvm_loads_its_classes_from_it():
    option = stack("spark-classes").strip()
    archive = Path(option.removeprefix("-XX:SharedArchiveFile="))
    assert option.startswith("-XX:SharedArchiveFile=") and archive.is_file()
    made_at = archive.stat().st_mtime_ns
    assert stack("spark-classes").strip() == option and archive.stat().st_mtime_ns == made_at, "made again"
    # scripts/test gives it to every Spark driver of the suite
    assert option in os.environ.get("TWOPHASE_SPARK_DRIVER_JAVA_OPTIONS", ""), "scripts/test did not pass it on"

    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{option} -Xlog:class+load=info"}
    proc = subprocess.run([str(spark_submit), "--version"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loads = [line for line in proc.stdout.splitlines() if "[class,load]" in line]
    from_archive = [line for line in loads if "source: shared objects file (top)" in line]
    # Spark's own classes too, not only the JDK's (those come from the JDK's own archive)
    assert any(" org.apache.spark." in line for line in from_archive), loads[:20]
    assert len(from_archive) > len(loads) / 2, f"{len(from_archive)} of {len(loads)} classes from the archive"
