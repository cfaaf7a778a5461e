"""Two prepare attempts of one load at once: only the one the log fences in counts.

Airflow retries the prepare task when the process that ran spark-submit died (a worker
restart, an evicted pod), while the first attempt's Spark driver may still run: a zombie
(apache/airflow#17479). Here both attempts are real processes running the coordinator's
prepare of the multi-target load (support.many_spec: three tables over two databases, two
topics, an Iceberg table) with real Spark: in local mode, and on the stack's Spark cluster
(both applications at once, one executor each on the worker that cannot see the checkout). The zombie pauses at a failpoint after its first
Postgres PREPARE; the retry, with a different number of rows, runs whole meanwhile; then the
zombie goes on, finds itself superseded and discards its own. Exactly the retry's rows and
records are committed, nothing of the zombie's is visible or left behind. (A zombie that dies
instead, its leftovers found by the retry's hooks and the sweep: the contract suite,
test_two_prepare_attempts_at_once_only_the_voted_one_commits, for every kind.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from support import REPORTING, iceberg_leftovers, many_seen, many_spec
from twophase.connections import Connections
from twophase.ops import recovery
from twophase.ops.verify import verify
from twophase.participants.postgres import prepared_gids, staging_tables
from twophase.protocol import coordinator
from twophase.protocol.states import State

ZOMBIE_ROWS, RETRY_ROWS = 1500, 1100
DRIVER = Path(__file__).with_name("crash_driver.py")


def start_prepare(many, run_id, rows, env) -> subprocess.Popen:
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(DRIVER), json.dumps(many), run_id, str(rows), "0", "prepare-only"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the zombie attempt ended before its failpoint:\n{proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, "the zombie attempt never reached its failpoint"
        time.sleep(0.2)


def on_the_cluster(request) -> dict:
    """The environment of prepare processes whose executors run on the stack's Spark cluster
    (a worker that cannot see the checkout), with an Iceberg catalog whose warehouse it can
    reach (its tables' files are written by the executors)."""
    request.getfixturevalue("stack_cluster")
    master, python = os.environ.get("TWOPHASE_CLUSTER_SPARK_MASTER"), os.environ.get("TWOPHASE_CLUSTER_EXECUTOR_PYTHON")
    if not (master and python):
        pytest.fail("the stack's cluster is not in the environment: `scripts/stack cluster up` and "
                    "eval \"$(scripts/stack env)\" first (scripts/test does both)")
    catalog = request.getfixturevalue("shared_catalog")
    return {"TWOPHASE_TEST_SPARK_MASTER": master, "PYSPARK_PYTHON": python, "TWOPHASE_ICEBERG_CATALOG": catalog}


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_a_zombie_prepare_attempt_never_counts(where, txlog, many, pg_dsn, reporting_dsn, kafka_bootstrap, tmp_path,
                                               request):
    env = on_the_cluster(request) if where == "cluster" else {}
    many_conns = Connections(pg_dsn, kafka_bootstrap, {REPORTING: ("postgres", reporting_dsn)},
                             iceberg_catalog=os.environ["TWOPHASE_ICEBERG_CATALOG"])
    spec = many_spec(many, many["topic"])
    gate = tmp_path / "zombie-may-go-on"
    first = start_prepare(many, spec.run_id, ZOMBIE_ROWS,
                          {**env, "TWOPHASE_FAILPOINT": "pg.prepared", "TWOPHASE_FAILPOINT_WAIT": str(gate)})
    try:
        wait_for(Path(f"{gate}.reached"), first)
        assert txlog.get(spec.load_id).prepare_attempt == 1
        assert spec.load_id in staging_tables(pg_dsn).values(), "the zombie's staging is not there"
        assert not any(spec.load_id in gid for gid in prepared_gids(pg_dsn)), "prepare holds nothing"

        retry = start_prepare(many, spec.run_id, RETRY_ROWS, env)
        out, err = retry.communicate(timeout=300)
        assert retry.returncode == 0, err[-3000:]
        load = txlog.get(spec.load_id)
        assert (load.state, load.prepare_attempt) == (State.PREPARED, 2)

        gate.touch()
        _, err = first.communicate(timeout=300)
        assert first.returncode != 0
        assert "prepare attempt 1 of load" in err and "superseded by attempt 2" in err, err[-3000:]
    finally:
        gate.touch()
        if first.poll() is None:
            first.kill()

    load = txlog.get(spec.load_id)
    assert (load.state, load.prepare_attempt, load.prepare_error) == (State.PREPARED, 2, None)
    assert coordinator.vote(txlog, many_conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, many_conns, spec.load_id)
    recovery.recover(txlog, many_conns, deadline=timedelta(0), pipeline=spec.pipeline)

    load = txlog.get(spec.load_id)
    assert load.state == State.COMMITTED, load.reason
    [finding] = verify(txlog, many_conns, [load])
    assert finding.ok, finding
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == {
        "orders": RETRY_ROWS, "summary": 1, "reporting": RETRY_ROWS, "topic": RETRY_ROWS, "topic2": RETRY_ROWS,
        "iceberg": RETRY_ROWS}
    for dsn in (pg_dsn, reporting_dsn):
        assert [g for g in prepared_gids(dsn) if spec.load_id in g] == []
        assert [t for t, lid in staging_tables(dsn).items() if lid == spec.load_id] == []
    shown = subprocess.run([sys.executable, "-m", "twophase", "show", spec.load_id, "--json"], capture_output=True,
                           text=True, timeout=120, env=os.environ)
    assert shown.returncode == 0 and json.loads(shown.stdout)["prepare_attempts"] == 2, shown.stderr
    assert iceberg_leftovers(many["iceberg"], spec.load_id, attempt=1) == []
    assert iceberg_leftovers(many["iceberg"], spec.load_id, attempt=2) == []
