"""The recovery DAG's watcher: a trigger in Airflow's triggerer that looks at the log every
few seconds and wakes twophase_recovery (an event on the asset DRIVERLESS) as soon as a
decided load has no driver: its commit or rollback task died (twophase/ops/driverless.py).
Without it such a load would wait for the next scheduled recovery run, partly visible
(Kafka and Iceberg show it, Postgres does not yet) and holding its prepared transaction's
locks.

Airflow runs the watcher while the recovery DAG is unpaused; it starts when the
dag-processor next parses the DAG file after the DAG is unpaused.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator

from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from twophase.log import PostgresLog
from twophase.ops.driverless import Watch
from twophase.protocol import lease

from .kinds.postgres import DEFAULT_CONN_ID, address


class DriverlessLoads(BaseEventTrigger):
    """An event for each decided load that has no driver (see the module doc): its id,
    state and why. `pipeline`: only its loads ('' = every pipeline's); `idle_seconds`: how
    long a decided load may go without a driver before it is driverless (default: a
    driver's lease, TWOPHASE_DRIVER_LEASE_S)."""

    def __init__(self, log_conn_id: str = DEFAULT_CONN_ID, pipeline: str = "", poll_seconds: float = 5.0,
                 idle_seconds: float | None = None) -> None:
        super().__init__()
        self.log_conn_id, self.pipeline, self.poll_seconds = log_conn_id, pipeline, poll_seconds
        self.idle_seconds = idle_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"log_conn_id": self.log_conn_id, "pipeline": self.pipeline, "poll_seconds": self.poll_seconds,
                 "idle_seconds": self.idle_seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.sdk import BaseHook

        idle = timedelta(seconds=self.idle_seconds) if self.idle_seconds is not None else lease.length()
        watch, txlog = Watch(idle), None
        while True:
            try:
                if txlog is None:
                    conn = await BaseHook.aget_connection(self.log_conn_id)
                    txlog = PostgresLog(address(conn, self.log_conn_id))
                loads = await asyncio.to_thread(txlog.unresolved, self.pipeline or None)
            except Exception as exc:  # noqa: BLE001 - the log's server down: look again later
                self.log.warning("could not read the transaction log on %s: %s", self.log_conn_id,
                                 str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            else:
                for load, why in watch.due(loads, datetime.now(timezone.utc)):
                    self.log.info("load %s is %s and nobody drives it: %s; waking recovery",
                                  load.load_id, load.state.value, why)
                    yield TriggerEvent({"load_id": load.load_id, "state": load.state.value, "why": why})
            await asyncio.sleep(self.poll_seconds)


def driverless_asset(pipeline: str = "") -> Asset:
    """The asset the watcher updates, which the recovery DAG is scheduled on."""
    return Asset(name="twophase_driverless_loads", uri="twophase://driverless-loads",
                 watchers=[AssetWatcher(name="twophase_driverless_loads",
                                        trigger=DriverlessLoads(pipeline=pipeline))])
