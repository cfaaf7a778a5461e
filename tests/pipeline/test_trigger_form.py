"""The trigger form's Params refuse bad input before any task runs, naming the param."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("conf, message", [
    ({"date": "20-11-2026"}, "Invalid input for param date: '20-11-2026' is not a 'date'"),
    ({"mode": "upsert"}, "Invalid input for param mode: 'upsert' is not one of ['append', 'replace']"),
    ({"max_rejected_share": 2}, "Invalid input for param max_rejected_share: 2 is greater than the maximum of 1"),
    ({"min_rows": -1}, "Invalid input for param min_rows: -1 is less than the minimum of 0"),
])
def test_bad_params_are_refused_with_the_params_name(conf, message):
    airflow = Path(sys.executable).parent / "airflow"
    proc = subprocess.run([str(airflow), "dags", "test", "orders_daily_totals", "-c", json.dumps(conf)],
                          cwd=ROOT, env=os.environ, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert message in output
    assert "[DAG TEST] starting task_id=begin" not in output, "no task may run on bad params"
