"""Failpoints: kill the process at a named point, for crash tests.

Set TWOPHASE_FAILPOINT to a point's name and the process that reaches it dies with
SIGKILL, as a crash would (no cleanup, no finally blocks). With TWOPHASE_FAILPOINT_ONCE
set to a file path, only the first process to reach the point dies (the file records
it), so a retried Spark task or Airflow task then succeeds. With TWOPHASE_FAILPOINT_WAIT
set to a file path, the process pauses there instead (a slow zombie): it creates
`<path>.reached` and goes on once `<path>` exists (at most 10 minutes).
"""

from __future__ import annotations

import os
import signal
import sys
import time

POINTS = (
    "spark.partition_staged",       # a Spark task staged its partition, before it reports
    "spark.partition_midway",       # a Spark task streamed its first Arrow batch, not the rest
    "pg.prepared",                  # Postgres staging counted, its vote not yet returned
    "coordinator.votes_logged",     # votes logged, state not yet PREPARED
    "pg.before_prepare",            # vote task: promotion done, PREPARE TRANSACTION not yet sent
    "pg.after_prepare",             # vote task: PREPARE TRANSACTION done, readied vote not yet logged
    "coordinator.readied",          # vote task: every participant ready, decision not yet logged
    "pg.last_promoted",             # vote task: a last resource's rows and COMMIT marker written, not committed
    "pg.last_committed",            # vote task: a last resource committed, its outcome not yet returned
    "coordinator.last_committed",   # vote task: the last resource committed, the decision not yet logged
    "coordinator.decision_logged",  # decision logged, no phase-2 action yet
    "kafka.copy_middle",            # half of the Kafka copy produced, not committed
    "kafka.copy_committed",         # Kafka copy committed, COMMIT PREPARED not yet sent
    "pg.committed",                 # COMMIT PREPARED done, log not yet COMMITTED
    "coordinator.committed_logged", # COMMITTED logged, Postgres staging not yet dropped
    "rollback.middle",              # Kafka side rolled back, Postgres not yet
    "iceberg.prepared",             # Iceberg staged files checked, its vote not yet returned
    "iceberg.committed",            # Iceberg snapshot committed in the catalog, the next participant not yet
)


def hit(name: str) -> None:
    """Die here if TWOPHASE_FAILPOINT names this point (see module doc)."""
    if name not in POINTS:
        raise ValueError(f"unknown failpoint {name!r}")
    if os.environ.get("TWOPHASE_FAILPOINT") != name:
        return
    wait = os.environ.get("TWOPHASE_FAILPOINT_WAIT")
    if wait:
        print(f"twophase: failpoint {name}: process {os.getpid()} waits for {wait}", file=sys.stderr, flush=True)
        open(f"{wait}.reached", "w").close()
        deadline = time.monotonic() + 600
        while not os.path.exists(wait) and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    once = os.environ.get("TWOPHASE_FAILPOINT_ONCE")
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    print(f"twophase: failpoint {name}: killing process {os.getpid()}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
