"""A crash at every failpoint, then recovery: the load ends all or nothing, exact counts.

Each case runs a whole load in a child process with TWOPHASE_FAILPOINT set; the process
(or, for the spark.* points, a Spark task's Python worker) is SIGKILLed there. Then
recovery runs (deadline 0: presume abort at once) and `verify` must pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from support import make_spec, read_topic
from twophase import recovery
from twophase.participants.postgres import prepared_gids, staging_tables
from twophase.states import TERMINAL, State
from support import count_table_rows
from twophase.verify import verify

ROWS = 2000
DRIVER = Path(__file__).with_name("crash_driver.py")

# failpoint -> (quality gate passes?, does the driver die?, final state after recovery)
CASES = {
    "spark.partition_midway": (True, False, State.COMMITTED),
    "spark.partition_staged": (True, False, State.COMMITTED),
    "pg.before_prepare": (True, True, State.ABORTED),
    "pg.after_prepare": (True, True, State.ABORTED),
    "coordinator.votes_logged": (True, True, State.ABORTED),
    "coordinator.decision_logged": (True, True, State.COMMITTED),
    "kafka.copy_middle": (True, True, State.COMMITTED),
    "kafka.copy_committed": (True, True, State.COMMITTED),
    "pg.committed": (True, True, State.COMMITTED),
    "coordinator.committed_logged": (True, True, State.COMMITTED),
    "rollback.middle": (False, True, State.ABORTED),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(CASES))
def test_crash_then_recover(point, txlog, conns, target, tmp_path):
    gate_passes, driver_dies, final = CASES[point]
    spec = make_spec(target)
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, "TWOPHASE_FAILPOINT": point, "TWOPHASE_FAILPOINT_ONCE": str(tmp_path / "fired"),
           "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(DRIVER), target["table"], target["topic"], spec.run_id, str(ROWS),
         "0" if gate_passes else str(ROWS + 1)],
        env=env, capture_output=True, text=True, timeout=300)
    assert (tmp_path / "fired").exists(), f"failpoint {point} was never reached:\n{proc.stderr[-3000:]}"
    if driver_dies:
        assert proc.returncode == -9, f"expected the driver killed at {point}:\n{proc.stderr[-3000:]}"
        # Killed in doubt, except after the last state change, where only cleanup is left.
        in_doubt = point != "coordinator.committed_logged"
        assert (txlog.get(spec.load_id).state not in TERMINAL) == in_doubt
        actions = recovery.recover(txlog, conns, deadline=timedelta(0))
        mine = [a for a in actions if a.load_id == spec.load_id]
        assert mine and mine[0].action != "failed", actions
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]

    load = txlog.get(spec.load_id)
    assert load.state == final, load.reason
    [finding] = verify(txlog, conns, [load])
    assert finding.ok, finding
    expected = ROWS if final == State.COMMITTED else 0
    assert count_table_rows(conns.pg_dsn, target["table"], spec.load_id) == expected
    assert len(read_topic(conns.kafka_bootstrap, target["topic"])) == expected
    assert count_table_rows(conns.pg_dsn, target["table"], spec.load_id) == expected
    assert not [g for g in prepared_gids(conns.pg_dsn) if spec.load_id in g], "a prepared transaction leaked"
    assert spec.load_id not in staging_tables(conns.pg_dsn).values(), "a staging table leaked"
