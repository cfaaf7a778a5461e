"""A pytest run that used Spark ends with its summary, not with a traceback printed at exit.

The full suite imports Airflow (whose root log handler writes to the stdout pytest
captured) and uses the Spark fixture; Py4J used to log from `__del__` at interpreter exit,
into that closed stream: `--- Logging error --- ValueError: I/O operation on closed file`
after `147 passed` (spark_session.py says why and how the fixture avoids it). This runs the
same combination in a tiny pytest subprocess and reads the end of its output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parent

TINY_TEST = '''
import airflow  # noqa: F401  (puts Airflow's root log handler on the captured stdout, as in the full suite)

from spark_session import spark  # noqa: F401  (the fixture every Spark test uses)


def test_spark_counts(spark):
    assert spark.range(3).count() == 3
'''


def test_output_of_a_spark_test_run_ends_with_the_summary(tmp_path):
    (tmp_path / "test_tiny.py").write_text(TINY_TEST)
    # The fixture's folder and the tests' own (support.py), as the suite has them.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CORE), str(CORE.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tiny.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "Logging error" not in output, "something logged into a closed stream at exit:\n" + output[-3000:]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("1 passed"), output[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
