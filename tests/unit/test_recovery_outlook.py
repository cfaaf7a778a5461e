"""recovery.outlook (what the pipeline's page says recovery would do with a load not
finished) agrees with what recovery then does, case by case: the forecast and the act are
one set of rules. In-memory log and participants (test_coordinator.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from test_coordinator import Conns, make_spec, prepare_and_vote
from twophase.gates import approval
from twophase.log import MemoryLog
from twophase.ops import recovery
from twophase.participants.memory import MemoryStore
from twophase.protocol import coordinator
from twophase.protocol.states import State

ACTS = {"presumed abort", "commit re-driven", "rollback re-driven"}
LEAVES = {"waiting", "left to its driver"}


def undecided(log, conns):
    spec = make_spec("run-undecided")
    coordinator.begin(log, spec)
    return spec.load_id, log.get(spec.load_id).began_at


def asking(log, conns):
    spec = make_spec("run-asking")
    coordinator.begin(log, spec)
    log.transition(spec.load_id, State.PREPARED)
    load = approval.ask_approval(log, spec.load_id, timedelta(hours=3))
    return spec.load_id, datetime.fromisoformat(load.approval["timeout_at"])


def decided(log, conns):
    spec = make_spec("run-decided")
    assert prepare_and_vote(log, conns, spec).state == State.COMMITTING  # then its commit task died
    return spec.load_id, log.get(spec.load_id).decided_at


CASES = {  # name: (the load, minutes after its reference instant, recovery acts, what the page says)
    "young undecided": (undecided, 30, False, "in flight for 30 min: its prepare or vote may still run; recovery "
                                              "presumes abort in 90 min"),
    "undecided past the deadline": (undecided, 121, True, "in doubt for 121 min: no decision; recovery presumes "
                                                         "abort"),
    "asking a person": (asking, 119, False, "answer it in Airflow (the run's required action)"),
    "asking past the wait and the deadline": (asking, 121, True, "no decision; recovery presumes abort"),
    "decided, nobody drives it": (decided, 5, True, "decided 5 min ago, nobody drives its commit: recovery "
                                                    "re-drives it"),
    "decided long ago": (decided, 61, True, "nobody drives its commit: recovery re-drives it — stuck: recovery "
                                            "reports it failed"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_outlook_says_what_recovery_then_does(case):
    make, minutes, acts, says = CASES[case]
    log, store = MemoryLog(), MemoryStore()
    conns = Conns(store)
    load_id, since = make(log, conns)
    now = since + timedelta(minutes=minutes)
    seen = recovery.outlook(log.get(load_id), now)
    assert (seen.acts, says in seen.says) == (acts, True), seen
    [action] = [a for a in recovery.recover(log, conns, now=now) if a.load_id == load_id]
    assert action.action in (ACTS if acts else LEAVES), action.describe()


def test_a_decided_load_whose_driver_holds_its_lease_is_left_to_it():
    log, store = MemoryLog(), MemoryStore()
    conns = Conns(store)
    load_id, _ = decided(log, conns)
    log.claim_driver(load_id, "commit task on another machine", timedelta(minutes=10))
    now = datetime.now(timezone.utc)  # leases run on the log's clock
    seen = recovery.outlook(log.get(load_id), now)
    assert not seen.acts and seen.says.startswith("its commit runs now (commit task on another machine, lease until")
    [action] = [a for a in recovery.recover(log, conns, now=now) if a.load_id == load_id]
    assert action.action == "left to its driver", action.describe()
    assert recovery.outlook(log.get(load_id), now + timedelta(minutes=11)).acts, "an ended lease is taken over"
