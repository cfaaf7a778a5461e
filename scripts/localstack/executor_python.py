"""The Spark worker's own Python: a virtualenv outside the checkout, built from
requirements-executor.txt (what executors import, pinned as in requirements.txt).

The worker runs from this virtualenv's pyspark (its bin/spark-class) and its executors run
its python, so nothing of the checkout's .venv reaches them. Built once; rebuilt when the
requirements file or the base interpreter changes (a hash stamp, like scripts/install).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from .proc import StackError, run
from .settings import ROOT, cluster_dir, venv_bin

REQUIREMENTS = ROOT / "requirements-executor.txt"


def home() -> Path:
    return cluster_dir() / "executor-venv"


def python() -> Path:
    return home() / "bin" / "python"


def _base_python() -> str:
    """The interpreter the checkout's virtualenv was made from: executors must run the
    driver's Python version (PySpark refuses a worker of another minor version)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def spark_home() -> Path:
    """The virtualenv's pyspark package: Spark's jars and bin/spark-class."""
    found = sorted(home().glob("lib/python3*/site-packages/pyspark"))
    if not found:
        raise StackError(f"no pyspark in {home()}; run `scripts/stack cluster up`")
    return found[0]


def _wanted_stamp() -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(_base_python().encode())
    return digest.hexdigest()


def ensure() -> None:
    """Create or update the virtualenv when the stamp says it is not what the file asks."""
    stamp = home() / ".requirements.sha256"
    want = _wanted_stamp()
    if stamp.exists() and stamp.read_text() == want:
        return
    print(f"stack: building the executors' virtualenv in {home()} (first time: ~1 min)", flush=True)
    if home().exists():
        shutil.rmtree(home())
    run([_base_python(), "-m", "venv", str(home())])
    uv = venv_bin() / "uv"
    if not uv.exists():
        raise StackError(f"{uv} is missing; run scripts/install first")
    # uv (scripts/install puts it in .venv) only installs; the packages land in the new venv.
    run([str(uv), "pip", "sync", "--quiet", "--python", str(python()), str(REQUIREMENTS)])
    stamp.write_text(want)
