"""A crash at every failpoint, then recovery: the load ends all or nothing, exact counts.

Each case runs a load of the multi-target example (support.many_spec: three tables over
two databases, one of them fed by a second frame, two topics and an Iceberg table; commit
order: Kafka, Iceberg, then the prepared Postgres transactions; in the "last: " cases the
second database is the load's last resource, committed in the vote; in the "jvm: " cases
the Kafka copy runs in a JVM) with TWOPHASE_FAILPOINT set
in a child process, which is SIGKILLed there, at the first participant that reaches the
point. For a point of the vote or phase 2, the test prepares the load in its own Spark
session, as the prepare task does in its process, and the child runs the vote and phase 2,
as the next tasks do (without a Spark of its own to start). For a point of prepare the
child runs the whole load; at a spark.* point a Spark task's Python worker is what dies.
Then recovery runs (deadline 0: presume abort at once) and `verify` must pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from support import iceberg_leftovers, many_frames, many_seen, many_spec
from twophase.ops import recovery
from twophase.ops.verify import verify
from twophase.participants.kafka import jvm_copy
from twophase.participants.postgres import prepared_gids, staging_tables
from twophase.protocol import coordinator
from twophase.protocol.states import TERMINAL, State

ROWS = 2000
DRIVER = Path(__file__).with_name("crash_driver.py")

# failpoint -> (quality gate passes?, does the driver die?, final state after recovery).
# The points of prepare (the child runs the whole load):
IN_PREPARE = {
    "spark.partition_midway": (True, False, State.COMMITTED),
    "spark.partition_staged": (True, False, State.COMMITTED),
    "iceberg.prepared": (True, True, State.ABORTED),
    "coordinator.votes_logged": (True, True, State.ABORTED),
}
# ... and of the vote and phase 2 (the test prepares, the child runs the vote and phase 2):
AFTER_PREPARE = {
    "pg.before_prepare": (True, True, State.ABORTED),     # the vote's ready(), from here on
    "pg.after_prepare": (True, True, State.ABORTED),
    "coordinator.readied": (True, True, State.ABORTED),
    "coordinator.decision_logged": (True, True, State.COMMITTED),
    "iceberg.committed": (True, True, State.COMMITTED),
    "kafka.copy_middle": (True, True, State.COMMITTED),
    "kafka.copy_committed": (True, True, State.COMMITTED),
    "pg.committed": (True, True, State.COMMITTED),
    "coordinator.committed_logged": (True, True, State.COMMITTED),
    "rollback.middle": (False, True, State.ABORTED),
    # The reporting database as the load's last resource (docs/adr/0011): its commit in the
    # vote is the decision.
    "last: pg.last_promoted": (True, True, State.ABORTED),      # its rows and marker written, not committed
    "last: pg.last_committed": (True, True, State.COMMITTED),   # committed, the vote never learnt it
    "last: coordinator.last_committed": (True, True, State.COMMITTED),
    "last: rollback.middle": (False, True, State.ABORTED),
    # The Kafka commit copy in a JVM (kafka/jvm_copy.py): killed with its driver.
    "jvm: kafka.copy_middle": (True, True, State.COMMITTED),
    "jvm: kafka.copy_committed": (True, True, State.COMMITTED),
}
CASES = {**IN_PREPARE, **AFTER_PREPARE}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(CASES))
def test_crash_then_recover(point, spark, txlog, many_conns, many, pg_dsn, reporting_dsn, kafka_bootstrap, tmp_path,
                            monkeypatch):
    gate_passes, driver_dies, final = CASES[point]
    many = {**many, "last": point.startswith("last: ")}
    if point.startswith("jvm: "):  # the driver's copy and recovery's
        monkeypatch.setenv(jvm_copy.MIN_RECORDS_ENV, "0")
    point = point.removeprefix("last: ").removeprefix("jvm: ")
    spec = many_spec(many, many["topic"])
    mode = []
    if point not in IN_PREPARE:
        coordinator.begin(txlog, spec, many_conns)
        coordinator.prepare(txlog, many_conns, spec.load_id, many_frames(spark, ROWS))
        mode = ["decide"]
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, "TWOPHASE_FAILPOINT": point, "TWOPHASE_FAILPOINT_ONCE": str(tmp_path / "fired"),
           "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(DRIVER), json.dumps(many), spec.run_id, str(ROWS), "0" if gate_passes else str(ROWS + 1),
         *mode], env=env, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "fired").exists(), f"failpoint {point} was never reached:\n{proc.stderr[-3000:]}"
    if driver_dies:
        assert proc.returncode == -9, f"expected the driver killed at {point}:\n{proc.stderr[-3000:]}"
        # Killed in doubt, except after the last state change, where only cleanup is left.
        in_doubt = point != "coordinator.committed_logged"
        assert (txlog.get(spec.load_id).state not in TERMINAL) == in_doubt
        actions = recovery.recover(txlog, many_conns, deadline=timedelta(0), pipeline=spec.pipeline)
        mine = [a for a in actions if a.load_id == spec.load_id]
        assert mine and mine[0].action != "failed", actions
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]

    load = txlog.get(spec.load_id)
    assert load.state == final, load.reason
    [finding] = verify(txlog, many_conns, [load])
    assert finding.ok, finding
    committed = final == State.COMMITTED
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == {
        "orders": ROWS if committed else 0, "summary": 1 if committed else 0, "reporting": ROWS if committed else 0,
        "topic": ROWS if committed else 0, "topic2": ROWS if committed else 0, "iceberg": ROWS if committed else 0}
    assert iceberg_leftovers(many["iceberg"], spec.load_id) == [], "an unreferenced Iceberg file leaked"
    for dsn in (pg_dsn, reporting_dsn):
        assert not [g for g in prepared_gids(dsn) if spec.load_id in g], "a prepared transaction leaked"
        assert spec.load_id not in staging_tables(dsn).values(), "a staging table leaked"
    if many["last"]:
        assert _decision_marker(reporting_dsn, spec.load_id) == ("COMMIT" if committed else "ABORT")


def _decision_marker(dsn: str, load_id: str) -> str | None:
    import psycopg2

    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("select decision from twophase.decisions where load_id = %s", (load_id,))
        row = cur.fetchone()
    return row[0] if row else None
