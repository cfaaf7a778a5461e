"""bench/approval.py (from a person's approval to visible data, on the real Airflow) runs
to its report at a toy size, so it cannot rot between the reports made with it; its
figure is not checked here. It runs on the UI tests' Airflow (tests/ui/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import ROOT

pytestmark = [pytest.mark.ui, pytest.mark.slow]


def test_the_approval_bench_runs_at_a_toy_size(airflow_ui):
    proc = subprocess.run([sys.executable, "-m", "bench.approval", "--reps", "1", "--lines", "500", "--read-s", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "approval to visible data, 1 runs of 500 input lines: median" in proc.stdout, proc.stdout
