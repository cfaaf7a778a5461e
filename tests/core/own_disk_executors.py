"""A prepare whose Spark executors have a disk of their own, as on a cluster.

On a cluster, `file:///x` is a different folder on each machine: what the driver lists
there the workers may not have, and what executors write there stays on their worker. To
show that for real on one machine, `submit_prepare` runs a job's prepare through
spark-submit on Spark's `local-cluster` master (executors in JVMs of their own) with a
`java` that starts each executor in a mount namespace of its own, where one folder is an
empty tmpfs: the driver sees the real folder, the executors theirs. Needs root (or
CAP_SYS_ADMIN) for `unshare --mount`, as the test machines and CI have.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import jvm_confs

ROOT = Path(__file__).resolve().parents[2]
EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _real_java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        pytest.fail("no java found (JAVA_HOME or PATH)")
    return os.path.realpath(java)


def _java_home(where: Path, hidden: Path) -> Path:
    """A JAVA_HOME whose bin/java runs executors with `hidden` replaced by an empty tmpfs."""
    for path in (str(hidden), _real_java()):
        if "'" in path:
            pytest.fail(f"cannot quote {path!r} in a shell script")
    home = where / "java-home"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"""#!/bin/sh
# Spark executors get a mount namespace of their own in which {hidden} is an empty tmpfs.
case "$*" in
  *{EXECUTOR}*)
    exec unshare --mount --propagation private /bin/sh -c 'mount -t tmpfs own-disk "$0" && exec "$@"' \\
      '{hidden}' '{_real_java()}' "$@" ;;
esac
exec '{_real_java()}' "$@"
""")
    java.chmod(0o755)
    return home


def _spark_home(where: Path) -> Path:
    """pyspark's folder by symbolic links, so that the local-cluster worker's `work` folder
    (it keeps executors' logs there) is the test's, not inside the shared virtualenv."""
    import pyspark

    real = Path(pyspark.__file__).parent
    home = where / "spark-home"
    home.mkdir()
    for entry in real.iterdir():
        if entry.name != "work":
            (home / entry.name).symlink_to(entry)
    return home


def check_namespaces() -> None:
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"`unshare --mount` is refused here ({proc.stderr.strip()}): these tests need root or "
                    "CAP_SYS_ADMIN to give executors a disk of their own")


def submit_prepare(where: Path, job: str, load_id: str, hidden: Path) -> subprocess.CompletedProcess:
    """spark-submit `job` (a file of spark_jobs/) for `load_id` on local-cluster[1,1,1024],
    executors seeing `hidden` (an existing folder) as an empty one of their own."""
    check_namespaces()
    if not hidden.is_dir():
        raise ValueError(f"{hidden} must be an existing folder to hide it")
    spark_home = _spark_home(where)
    env = {**os.environ, "JAVA_HOME": str(_java_home(where, hidden)), "SPARK_HOME": str(spark_home),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT / "spark_jobs")])}
    return subprocess.run(
        [str(spark_home / "bin" / "spark-submit"), "--master", "local-cluster[1,1,1024]",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
         "--conf", "spark.ui.showConsoleProgress=false", *jvm_confs(),
         str(ROOT / "spark_jobs" / job), "--load-id", load_id],
        env=env, capture_output=True, text=True, timeout=600)
