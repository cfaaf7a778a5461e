"""The recovery task: the core's recover(), with a log of what it resolved."""

from __future__ import annotations

import logging
from datetime import timedelta

from twophase import recovery
from twophase.log import TransactionLog

from .connections import from_airflow

log = logging.getLogger("twophase")


def recover_all(deadline: timedelta, pg_conn_id: str = "twophase_postgres",
                kafka_conn_id: str = "twophase_kafka") -> list[recovery.Action]:
    conns = from_airflow(pg_conn_id, kafka_conn_id)
    actions = recovery.recover(TransactionLog(conns.pg_dsn), conns, deadline)
    if not actions:
        log.info("nothing in doubt: every load is resolved and no orphan is left")
    for action in actions:
        log.info("%s", action.describe())
    failed = [a for a in actions if a.action == "failed"]
    if failed:
        raise RuntimeError(f"{len(failed)} load(s) could not be resolved: " + "; ".join(a.describe() for a in failed))
    return actions
