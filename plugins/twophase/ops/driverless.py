"""Decided loads that nobody drives, found as soon as it happens: what wakes recovery
between its scheduled runs (the recovery DAG's watcher, twophase_airflow/watcher.py).

A COMMITTING or ABORTING load is driverless when
- its driver's lease ended without a release (the driver died, or stalled past it), or
  its driver's process is gone from this machine (lease.gone: known at once), or
- nobody holds its lease and nothing changed for `idle` (the run died between the vote
  and its commit or rollback task, or that task gave up: "retry later" until its retries
  ran out).

A Watch says which of them to wake recovery for, at each look: a load once for each
driver that left it, and one that stays driverless (recovery itself could not finish it:
a server down) again after `idle`, then after twice as long each time, so a long outage
wakes recovery a handful of times, not once a minute. Waking it too early is harmless:
recovery claims the load's lease by compare-and-set and leaves a load that has a live
driver to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..log import Load
from ..protocol import lease
from ..protocol.states import PHASE_2


def why_driverless(load: Load, now: datetime, idle: timedelta) -> str | None:
    """Why nobody drives this decided load now (None: it is not decided-and-unfinished, a
    live driver holds it, or it changed less than `idle` ago)."""
    if load.state not in PHASE_2:
        return None
    if load.driver is not None:
        if load.driver_until is not None and load.driver_until <= now:
            return f"its driver's lease ended at {load.driver_until:%H:%M:%S} ({load.driver})"
        if lease.gone(load.driver):
            return f"its driver's process is gone ({load.driver})"
        return None
    if now - load.updated_at >= idle:
        return f"no driver since {load.updated_at:%H:%M:%S}"
    return None


@dataclass
class Watch:
    """Which driverless loads to wake recovery for, look after look (see the module doc)."""

    idle: timedelta
    _woken: dict[str, tuple[tuple, datetime, int]] = field(default_factory=dict)  # load: (what it was, when, times)

    def due(self, loads: list[Load], now: datetime) -> list[tuple[Load, str]]:
        """The loads among `loads` (the log's unresolved ones) to wake recovery for now,
        each with why; forgets the loads that are no longer unresolved."""
        unresolved = {x.load_id for x in loads}
        self._woken = {lid: woken for lid, woken in self._woken.items() if lid in unresolved}
        found = []
        for load in loads:
            why = why_driverless(load, now, self.idle)
            if why is None:
                continue
            seen = (load.state, load.driver, load.driver_until, load.updated_at)
            before, at, times = self._woken.get(load.load_id, (None, None, 0))
            if seen == before or (times and now - at < self.idle * 2 ** (times - 1)):
                continue
            self._woken[load.load_id] = (seen, now, times + 1)
            found.append((load, why))
        return found
