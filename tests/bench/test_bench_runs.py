"""Every benchmark entry point runs to its report at a toy size, so none can rot between
the reports made with it (bench/README.md). The figures of a toy run mean nothing and are
not checked; that each entry point still runs end to end on the real stack, and produces
its report, is. (The approval bench runs with the UI tests, tests/ui/test_bench_approval.py;
the cluster bench with the cluster's, tests/pipeline/test_cluster_pipeline.py.)

The runs share the bench's own pipeline, schema and topics (`bench`), so they run one at a
time on one worker (tests/conftest.py, group_of). The exposure bench runs the example DAG of
an earlier release through `airflow dags test`, which registers that release's DAG in the
metadata database: it gets one of its own (BENCH_AIRFLOW_DB, made and migrated by
`scripts/stack up` with TWOPHASE_AIRFLOW_DB), so the DAG runs of other tests meanwhile keep
this release's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from bench.memory import LIVE_EVERY_S
from support import ROOT, localstack, stack

pytestmark = pytest.mark.slow
EXPOSURE_BASELINE = "360c324"  # bench/exposure.py's default baseline


BENCH_AIRFLOW_DB = "airflow_bench"


def bench(*args: str, timeout: float = 900, env: dict | None = None) -> str:
    """`python -m <args>` from the checkout, as a person runs it; its standard output."""
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert proc.returncode == 0, f"python -m {' '.join(args)} failed ({proc.returncode}):\n" \
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout


def test_the_main_bench(tmp_path):
    # The wide shape only (the narrow one is the comparison's, below): each shape is a whole
    # pass of every contender, the same code on other columns.
    # The commit copy in a JVM whatever the size, as a large load's (its memory is measured).
    env = {**os.environ, "TWOPHASE_KAFKA_JVM_COPY_MIN_RECORDS": "0"}
    out = bench("bench", "--sizes", "3000", "--shapes", "wide", "--reps", "1", "--no-warm-up", "--live-heap",
                "--results", str(tmp_path), env=env)
    assert f"report written to {tmp_path}" in out, out
    report = (tmp_path / "latest.md").read_text()
    assert "### `wide`, 3,000 rows" in report, report[:3000]
    # The driver JVM runs the serial collector (bench/session.py), as the machine's line says.
    assert re.search(r"- \*\*spark\*\*: Spark .*collectors Copy, MarkSweepCompact\)", report), report[:3000]
    for contender in ("| peer: Spark JDBC writer, default options |", "| atomic: prepare |",
                      "| limit: COPY FROM STDIN", "| limit: Kafka ProducerPerformance", "| Iceberg: staging pass",
                      "| staging breakdown: the same pass in Python (TWOPHASE_STAGING_PASS=python) |"):
        assert contender in report, f"{contender} missing:\n{report[:5000]}"
    # The copy alone (first record to commit) is timed inside the commit step, and the copy's
    # target compares it with the tool, the whole step in its note.
    assert re.search(r"\|   │  └ the copy alone: first record to commit .* \| \d+\.\d\d s \|", report), report
    assert re.search(r"\| Kafka commit copy records/s \(start-up excluded, as the tool's\) .* \| wide \| \d+% .*"
                     r"the whole commit step .* ÷ the tool: \d+% at 3,000", report), report
    for process in ("Spark driver JVM", "Kafka commit copy's JVM", "Kafka broker", "Postgres servers (PSS)"):
        assert re.search(rf"\| peak memory of the {re.escape(process)} during the atomic load .* \| "
                         r"[1-9][\d,]* MB \(1\.00x\) \|", report), f"no memory figure of the {process}:\n{report}"
    assert re.search(rf"\| live heap of the Spark driver JVM \(90th percentile .* every {LIVE_EVERY_S:g} s; .* \| "
                     r"[1-9][\d,]* MB \(1\.00x; peak [1-9][\d,]* MB\) \|", report), f"no live heap figure:\n{report}"


def test_the_comparison_of_two_releases(tmp_path):
    # The exposure bench's baseline too: both keep that release's log in twophase_baseline,
    # which a newer release would migrate past what the older one reads.
    out = bench("bench.compare", EXPOSURE_BASELINE, "--rows", "3000", "--reps", "1", "--results", str(tmp_path))
    report = (tmp_path / "compare-latest.md").read_text()
    assert "| atomic load (begin to commit) |" in report and report in out, report


def test_the_example_jobs_validation():
    out = bench("bench.validation", "--lines", "3000", "--reps", "1", "--no-warm-up")
    assert "| 3,000 |" in out and "lines/s" in out, out


def test_the_schema_readers_bench():
    out = bench("bench.readers", "--lines", "2000", "--reps", "1", "--no-warm-up")
    assert "| csv | 2,000 |" in out and "| jsonl | 2,000 |" in out and "of accounting's speed" in out, out


def test_the_kafka_sources_bench():
    out = bench("bench.source", "--events", "2000", "--small", "100", "--reps", "1", "--no-warm-up")
    assert "| the load, begin to commit (Postgres, Kafka, Iceberg) |" in out, out
    assert "| **whole load** |" in out and "prepare: the driver's start" in out, out


def test_the_last_resource_beside_the_prepared_way():
    out = bench("bench.last_resource", "--rows", "2000", "--reps", "1")
    assert "2,000 rows, 1 repetitions per way" in out, out
    assert "| prepared |" in out and "| last resource |" in out, out


def test_attach_beside_insert():
    out = bench("bench.attach", "--rows", "2000", "--reps", "1")
    assert "2,000 rows of one day, 1 repetitions" in out, out
    assert "| insert | replace |" in out and "| attach | append |" in out, out


def test_the_exposure_window_before_and_after(monkeypatch):
    monkeypatch.setenv("TWOPHASE_AIRFLOW_DB", BENCH_AIRFLOW_DB)
    stack("up", env=dict(os.environ))  # makes and migrates the database (once)
    own = {**os.environ, **localstack("airflow").environment()}  # what `scripts/stack env` prints for it
    out = bench("bench.exposure", "--lines", "3000", "--customers", "1000", "--reps", "1", env=own)
    assert "| baseline |" in out and "| now |" in out, out
