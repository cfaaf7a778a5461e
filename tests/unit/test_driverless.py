"""A decided load nobody drives is found at once (twophase/ops/driverless.py): its driver's
lease ended or its process is gone, or no driver came for a while; the watcher wakes
recovery once per driver that left it, and again for one that stays driverless only after
a growing wait. In-memory log (test_coordinator.py); the clock is the test's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from test_coordinator import Conns, make_spec, prepare_and_vote
from twophase.log import MemoryLog
from twophase.ops.driverless import Watch, why_driverless
from twophase.participants.memory import MemoryStore
from twophase.protocol import coordinator, lease
from twophase.protocol.states import State

IDLE = timedelta(seconds=60)
T0 = datetime(2026, 11, 26, 12, tzinfo=timezone.utc)


def decided(clock, decision=State.COMMITTING):
    log, store, spec = MemoryLog(clock=lambda: clock[0]), MemoryStore(), make_spec()
    conns = Conns(store)
    load = prepare_and_vote(log, conns, spec)
    if decision == State.ABORTING:
        log.transition(spec.load_id, State.ABORTING, expect=[State.COMMITTING], reason="test")
    assert log.get(spec.load_id).state == decision
    return log, conns, spec.load_id


def later(clock, seconds: float) -> datetime:
    clock[0] += timedelta(seconds=seconds)
    return clock[0]


def test_a_decided_load_without_a_driver_is_due_after_idle_then_ever_more_rarely():
    clock = [T0]
    log, _, lid = decided(clock)
    watch = Watch(IDLE)
    assert watch.due(log.unresolved(), later(clock, 59)) == []  # its commit task may be starting
    [(load, why)] = watch.due(log.unresolved(), later(clock, 1))
    assert load.load_id == lid and why.startswith("no driver since 12:00:00")
    assert watch.due(log.unresolved(), later(clock, 1)) == []  # woken once for what it saw
    # Recovery ran, could not finish it (a server down), released it: it changed.
    log.claim_driver(lid, "recovery", IDLE)
    log.release_driver(lid, "recovery")
    wakes = []
    for _ in range(8 * 60):  # eight minutes, a look every second
        if watch.due(log.unresolved(), later(clock, 1)):
            wakes.append(int((clock[0] - T0).total_seconds()))
            log.claim_driver(lid, "recovery", IDLE)
            log.release_driver(lid, "recovery")
    # Idle after the first wake, then 2x and 4x idle after each: not once a minute.
    assert wakes == [121, 241, 481], wakes


def test_a_driver_whose_lease_ended_is_due_once_and_a_live_one_never():
    clock = [T0]
    log, _, lid = decided(clock, State.ABORTING)
    log.claim_driver(lid, "a worker that died", IDLE)
    watch = Watch(IDLE)
    assert watch.due(log.unresolved(), later(clock, 59)) == []  # the lease lasts
    [(load, why)] = watch.due(log.unresolved(), later(clock, 1))
    assert why == "its driver's lease ended at 12:01:00 (a worker that died)"
    assert watch.due(log.unresolved(), later(clock, 600)) == []  # nobody took it since: woken once

    log.claim_driver(lid, "recovery", IDLE)  # recovery took it, and renews its lease
    for _ in range(10):
        assert log.renew_driver(lid, "recovery", IDLE)
        assert watch.due(log.unresolved(), later(clock, 30)) == []


def test_a_driver_whose_process_is_gone_is_due_at_once_and_recovery_finishes_the_load():
    clock = [T0]
    log, conns, lid = decided(clock)
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    dead = f"{socket.gethostname()} pid {killed.pid} step 0badc0de [{lease._machine()}:1]"
    log.claim_driver(lid, dead, timedelta(minutes=5))
    [(load, why)] = Watch(IDLE).due(log.unresolved(), later(clock, 1))
    assert why == f"its driver's process is gone ({dead})"
    alive = f"{socket.gethostname()} pid {os.getpid()} step 0badc0de [{lease._machine()}:{lease._started(os.getpid())}]"
    assert why_driverless(log.claim_driver(lid, alive, timedelta(minutes=5), dead=dead), clock[0], IDLE) is None
    log.release_driver(lid, alive)
    coordinator.commit(log, conns, lid)  # what the woken recovery does
    assert log.get(lid).state == State.COMMITTED
    assert Watch(IDLE).due(log.unresolved(), later(clock, 600)) == []


def test_loads_not_decided_are_never_due():
    clock = [T0]
    log, store, spec = MemoryLog(clock=lambda: clock[0]), MemoryStore(), make_spec()
    coordinator.begin(log, spec)
    assert log.get(spec.load_id).state == State.PREPARING
    assert Watch(IDLE).due(log.unresolved(), later(clock, 3600)) == []
