"""Recovery: resolve what crashes left in doubt, and clean orphans.

- PREPARING or PREPARED past the decision deadline: presumed abort (roll back, ABORTED),
  unless the load's last resource committed (its marker says so: docs/adr/0011), which
  decided COMMIT: its commit is re-driven.
  Younger ones are left alone: their prepare or vote may still be running. The deadline
  counts from the load's begin, or, for a load that asked a person's approval, from the
  answer or from the end of the wait for one (twophase.gates.approval). A load whose
  approval waits on a run that has ended (killed, marked failed: nobody can answer it any
  more; `run_state` says, from Airflow) is rejected and rolled back at once.
- COMMITTING: re-drive commit (decided means done). ABORTING: re-drive rollback. Either
  only when no other step drives the load now (its lease, twophase/protocol/lease.py): a load whose
  commit or rollback runs elsewhere is "left to its driver". A decided load that still
  cannot finish `stuck_after` its decision (default 1 hour: a server down that long, a bug
  that fails every time) is reported "failed", naming why, so that the recovery task ends
  red instead of saying "retry later" for ever; it is still retried at every run.
- Orphans: each kind of participant sweeps its servers for staging of loads that are
  unknown or already finished (Postgres: prepared transactions, staging tables); recovery
  of one pipeline sweeps only the staging of its own loads (their ids begin with its name).
- The quarantine's retention: rejected lines kept longer than `quarantine_retention`
  (default 7 days) are deleted (only the pipeline's, when one is given).
Every step is idempotent, so recovery may run while pipelines run, and run again. Each
load is resolved on its own: whatever one raises (a race with its pipeline's own step, a
bug) is that load's action, "left to its pipeline" or "failed", and the others go on.
A server that is down leaves its loads as "retry later" (one line naming it); with the
log's own Postgres down, recover raises PostgresUnreachable (one line) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable

from ..connections import Connections
from ..errors import MissingPrivilege, root_cause
from ..gates import approval, quarantine
from ..log import DriverBusy, Load, StateConflict, TransactionLog
from ..protocol import coordinator
from ..protocol.states import PHASE_2, IllegalTransition, State
from .driverless import why_driverless

DEFAULT_DEADLINE = timedelta(hours=2)
DEFAULT_STUCK_AFTER = timedelta(hours=1)
RUN_ENDED = ("success", "failed")  # Airflow's states of a DAG run that is over


@dataclass(frozen=True)
class Action:
    load_id: str
    action: str   # presumed abort | rejected, rolled back | commit re-driven | rollback re-driven | waiting |
    #               retry later |
    #               left to its driver | left to its pipeline | failed | orphan ...
    detail: str = ""

    def describe(self) -> str:
        return f"{self.load_id}: {self.action}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Outlook:
    """What recovery would do with an unfinished load at a given instant, nothing done:
    whether its next run acts on the load (`acts`), and what the load waits for, for people
    (the pipeline's page)."""

    acts: bool
    says: str


def outlook(load: Load, now: datetime, deadline: timedelta = DEFAULT_DEADLINE,
            stuck_after: timedelta = DEFAULT_STUCK_AFTER) -> Outlook:
    """What recovery would do with the unfinished `load` at `now`, by the rules it acts on
    (the module doc): a decided load is re-driven unless a live driver holds its lease (as
    the recovery DAG's watcher tells it: driverless.why_driverless); an undecided one is
    presumed aborted once presumed_abort_at has passed. (An approval whose asking run has
    ended is rejected at once: that needs Airflow, which this does not ask.)"""
    if load.state in PHASE_2:
        phase = "commit" if load.state == State.COMMITTING else "rollback"
        if why_driverless(load, now, idle=timedelta(0)) is None:  # a live driver holds its lease
            return Outlook(False, f"its {phase} runs now ({load.driver}, lease until {load.driver_until:%H:%M:%S})")
        failed = " — stuck: recovery reports it failed" if stuck(load, now, stuck_after) else ""
        return Outlook(True, f"decided {_minutes(now - (load.decided_at or load.began_at))} ago, nobody drives its "
                             f"{phase}: recovery re-drives it{failed}")
    abort_at = presumed_abort_at(load, deadline)
    if now >= abort_at:
        return Outlook(True, f"in doubt for {_minutes(now - load.began_at)}: no decision; recovery presumes abort")
    if load.approval and "decision" not in load.approval:
        return Outlook(False, f"{approval.describe(load.approval)}: answer it in Airflow (the run's required action)")
    return Outlook(False, f"in flight for {_minutes(now - load.began_at)}: its prepare or vote may still run; "
                          f"recovery presumes abort in {_minutes(abort_at - now)}")


def presumed_abort_at(load: Load, deadline: timedelta = DEFAULT_DEADLINE) -> datetime:
    """When recovery presumes an undecided load abandoned: `deadline` after it began, or,
    when it asked a person's approval, after the answer or the end of the wait for one."""
    return approval.deadline_counts_from(load.began_at, load.approval) + deadline


def stuck(load: Load, now: datetime, stuck_after: timedelta = DEFAULT_STUCK_AFTER) -> bool:
    """Decided `stuck_after` ago or more and not finished: recovery reports it failed."""
    return load.decided_at is not None and now - load.decided_at >= stuck_after


def recover(log: TransactionLog, conns: Connections, deadline: timedelta = DEFAULT_DEADLINE,
            now: datetime | None = None, pipeline: str | None = None,
            quarantine_retention: timedelta = quarantine.DEFAULT_RETENTION,
            stuck_after: timedelta = DEFAULT_STUCK_AFTER,
            run_state: Callable[[str, str], str] | None = None) -> list[Action]:
    """Resolve the unresolved loads, then sweep orphans (both of `pipeline` only, when
    given) and the quarantine's old entries. `run_state(dag_id, run_id)`: the state of
    a DAG run (Airflow's), to find approvals whose asking run has ended."""
    log.ensure_schema()  # the log's server down: PostgresUnreachable (the log maps its own errors)
    now = now or datetime.now(timezone.utc)
    actions = [_stuck(_resolve(log, conns, load, deadline, now, run_state), load, now, stuck_after)
               for load in log.unresolved(pipeline)]
    actions += _clean_orphans(log, conns, pipeline)
    deleted = log.sweep_quarantine(quarantine_retention, pipeline)
    if deleted:
        actions.append(Action("quarantine", "retention sweep",
                              f"deleted {deleted} rejected lines kept more than {quarantine_retention.days} days"))
    return actions


def _resolve(log, conns, load, deadline, now, run_state=None) -> Action:
    lid = load.load_id
    try:
        if load.state == State.PREPARED and _asking_run_ended(load, run_state):
            answered = approval.answer_approval(log, lid, False, now, run_ended=True)
            decided = coordinator.vote(log, conns, lid, gates=[approval.ApprovalGate(required=True)])
            if decided.state == State.COMMITTING:  # its last resource had committed: that was the decision
                return _committed_last(log, conns, lid, "its last resource had committed before the rejection")
            outcomes = coordinator.rollback(log, conns, lid)
            return Action(lid, "rejected, rolled back", f"{approval.describe(answered.approval)}; {_describe(outcomes)}")
        if load.state in (State.PREPARING, State.PREPARED):
            after = "its approval's answer or timeout" if load.approval else "the load began"
            if now < presumed_abort_at(load, deadline):
                waits = (approval.describe(load.approval) if load.approval
                         else f"began {_minutes(now - load.began_at)} ago")
                return Action(lid, "waiting", f"{load.state}, {waits}; presumed abort {_minutes(deadline)} after {after}")
            try:
                outcomes = coordinator.rollback(log, conns, lid, reason=(
                    f"presumed abort: no decision {_minutes(deadline)} after {after} (recovery)"))
            except coordinator.DecidedCommit as exc:
                return _committed_last(log, conns, lid, str(exc))
            return Action(lid, "presumed abort", _describe(outcomes))
        if load.state == State.COMMITTING:
            return Action(lid, "commit re-driven", _describe(coordinator.commit(log, conns, lid)))
        return Action(lid, "rollback re-driven", _describe(coordinator.rollback(log, conns, lid)))
    except coordinator.RetryLater as exc:
        return Action(lid, "retry later", str(exc))
    except DriverBusy as exc:
        return Action(lid, "left to its driver", str(exc))
    except (coordinator.LoadAborted, coordinator.ProtocolViolation, MissingPrivilege) as exc:
        return Action(lid, "failed", str(exc))
    except (StateConflict, IllegalTransition) as exc:  # another actor (its own vote or commit) moved it meanwhile
        return Action(lid, "left to its pipeline", f"it changed while recovery looked at it: {exc}")
    except Exception as exc:  # noqa: BLE001 - one load's failure must not stop the others' recovery
        return Action(lid, "failed", f"recovery could not resolve it: {root_cause(exc)}")


def _committed_last(log, conns, lid: str, why: str) -> Action:
    """A load whose last resource committed before its decision was logged: it commits."""
    return Action(lid, "commit re-driven", f"{why}; {_describe(coordinator.commit(log, conns, lid))}")


def _asking_run_ended(load, run_state) -> bool:
    """The load waits for an approval whose asking run is over (an unknown run state, or
    one Airflow cannot say, is not)."""
    run = approval.waits_on_a_run(load.approval)
    if run is None or run_state is None:
        return False
    try:
        return run_state(*run) in RUN_ENDED
    except Exception:  # noqa: BLE001 - Airflow cannot say: the load keeps waiting, as before
        return False


def _stuck(action: Action, load, now: datetime, stuck_after: timedelta) -> Action:
    """A decided load that still cannot finish `stuck_after` its decision: failed."""
    if action.action != "retry later" or not stuck(load, now, stuck_after):
        return action
    way_out = (f"; once nothing of it is visible, `python -m twophase abandon {load.load_id} --reason ...` ends "
               "it and frees its data interval" if load.state == State.ABORTING else
               "; fix what the reason names: the commit is retried at every run")
    return Action(action.load_id, "failed", f"{load.state} for {_minutes(now - load.decided_at)} since its "
                  f"decision, still unable to finish (reported failed after {_minutes(stuck_after)}; retried at "
                  f"every recovery run): {action.detail}{way_out}")


def _clean_orphans(log: TransactionLog, conns: Connections, pipeline: str | None) -> list[Action]:
    swept = conns.sweep(log.states_of, pipeline)
    return [Action(x.load_id, x.action, x.detail) for x in swept]


def _describe(outcomes) -> str:
    return "; ".join(o.describe() for o in outcomes) or "nothing left to do"


def _minutes(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 60:.0f} min"
