"""The recovery task: the core's recover(), with a log of what it resolved."""

from __future__ import annotations

import logging
from datetime import timedelta

from twophase.gates import quarantine
from twophase.log import PostgresLog
from twophase.ops import recovery

from .connections import from_airflow
from .kinds.postgres import DEFAULT_CONN_ID as DEFAULT_POSTGRES

log = logging.getLogger("twophase")


def recover_all(deadline: timedelta, log_conn_id: str = DEFAULT_POSTGRES,
                sweep_conn_ids: dict[str, str] | None = None,
                quarantine_retention: timedelta = quarantine.DEFAULT_RETENTION,
                pipeline: str | None = None,
                stuck_after: timedelta = recovery.DEFAULT_STUCK_AFTER,
                run_state=None) -> list[recovery.Action]:
    """Recover every load of the log on `log_conn_id` (only `pipeline`'s, its orphans and
    quarantined lines, when given); the servers their targets name are found by connection
    id. Orphans are swept on the log's database, the default Kafka cluster and
    `sweep_conn_ids` ({connection id: kind}: the other databases targets use).
    `run_state(dag_id, run_id)`: a DAG run's state (the task's `ti.get_dagrun_state`), so a
    load whose approval waits on a run that has ended is rejected and rolled back at once."""
    conns = from_airflow(log_conn_id, sweep_conn_ids, lookup=True)
    actions = recovery.recover(PostgresLog(conns.pg_dsn), conns, deadline, quarantine_retention=quarantine_retention,
                               pipeline=pipeline, stuck_after=stuck_after, run_state=run_state)
    if not actions:
        log.info("nothing in doubt: every load is resolved and no orphan is left")
    for action in actions:
        log.info("%s", action.describe())
    failed = [a for a in actions if a.action == "failed"]
    if failed:
        raise RuntimeError(f"{len(failed)} load(s) could not be resolved: " + "; ".join(a.describe() for a in failed))
    return actions
