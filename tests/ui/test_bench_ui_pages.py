"""bench/ui_pages.py (how long the Transactions pages take to render with a long log) runs
to its report at a toy size, so it cannot rot between the reports made with it; its
figures are not checked here, only that every page rendered and the throwaway pipeline
is gone afterwards."""

from __future__ import annotations

import re
import subprocess
import sys

import psycopg2

from support import ROOT


def test_the_pages_bench_runs_at_a_toy_size(pg_dsn):
    proc = subprocess.run([sys.executable, "-m", "bench.ui_pages", "--loads", "300", "--reps", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    named = re.search(r"^300 loads of a throwaway pipeline \((\w+), deleted since\) written in", proc.stdout, re.M)
    assert named, proc.stdout
    rows = re.findall(r"^\| (list|list, pipeline|load, newest|load, oldest|pipeline) \| \d+ \| \d+ \|$", proc.stdout,
                      re.M)
    assert rows == ["list", "list, pipeline", "load, newest", "load, oldest", "pipeline"], proc.stdout
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select count(*) from twophase.loads where pipeline = %s", (named.group(1),))
        assert cur.fetchone()[0] == 0, "the throwaway pipeline is deleted"
