"""A person's approval of a load: asked after the audit, answered before the vote.

Optional per run. While a load waits for its answer it holds nothing on any target (the
participants are made ready only by the vote, after the answer). The approval is kept
with the load (loads.approval) as a JSON object that grows in two steps:

    asked:     {"asked_at": ISO time, "timeout_at": ISO time,
                "run": {"dag_id": ..., "run_id": ...}: the run whose task waits for the answer}
    answered:  + {"decision": "approved" | "rejected", "by": user name or null,
                  "by_id": user id or null, "answered_at": ISO time, "timed_out": bool,
                  "run_ended": bool}

An unanswered approval is rejected when it times out (`timed_out`, no user), and when the
run that asked it ended without an answer (`run_ended`: killed, marked failed by a person):
nobody can answer it any more, so recovery rejects it and aborts the load at once rather
than keep its data interval waiting for the timeout. A load whose
run asked for approval commits only when a person approved it; rejected, timed out or
never answered, the vote aborts it and says which. Recovery's deadline for an undecided
load counts from the approval's answer or timeout, not from the load's begin, so a load
that waits for a person is not presumed abandoned while the person may still answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from ..log import Load, TransactionLog
from ..protocol.states import State

APPROVED, REJECTED = "approved", "rejected"


def asked(now: datetime, timeout: timedelta, run: dict | None = None) -> dict:
    """The approval of a load that asks now and waits at most `timeout`; `run` ({dag_id,
    run_id}): the run whose task waits for the answer."""
    if timeout <= timedelta(0):
        raise ValueError(f"an approval's timeout must be positive, got {timeout}")
    return {"asked_at": now.isoformat(), "timeout_at": (now + timeout).isoformat(), **({"run": run} if run else {})}


def answered(approval: dict, approved: bool, at: datetime, by: str | None = None, by_id: str | None = None,
             timed_out: bool = False, run_ended: bool = False) -> dict:
    """`approval` (asked) with its answer. A timeout, or the end of the run that asked,
    is a rejection by nobody."""
    if "asked_at" not in approval:
        raise ValueError("an approval must be asked before it is answered")
    if (timed_out or run_ended) and approved:
        raise ValueError("a timed out approval, or one whose run ended, is a rejection")
    return {**approval, "decision": APPROVED if approved else REJECTED, "by": by, "by_id": by_id,
            "answered_at": at.isoformat(), "timed_out": timed_out, "run_ended": run_ended}


def reasons_to_abort(approval: dict | None, required: bool) -> list[str]:
    """Why the vote must abort a load whose run asked for approval ([] when approved)."""
    if not required or (approval or {}).get("decision") == APPROVED:
        return []
    return [describe(approval)]


def describe(approval: dict | None) -> str:
    """One line for logs and pages: who decided what and when, or what is missing."""
    if not approval:
        return "no approval was asked (the approve task did not run, or failed before it asked)"
    if "decision" not in approval:
        return f"waiting for approval since {approval['asked_at']}, at most until {approval['timeout_at']}"
    if approval.get("timed_out"):
        return (f"rejected: nobody answered the approval asked at {approval['asked_at']} before it timed out at "
                f"{approval['timeout_at']}")
    if approval.get("run_ended"):
        run = approval.get("run") or {}
        return (f"rejected: the run that asked for approval at {approval['asked_at']} "
                f"({run.get('dag_id')} {run.get('run_id')}) ended without an answer; seen at {approval['answered_at']}")
    return f"{approval['decision']} by {approval.get('by') or 'an unknown user'} at {approval['answered_at']}"


def to_visible_s(approval: dict | None, finished_at: datetime | None) -> float | None:
    """Seconds from a person's approval to the committed data being visible (the end of
    the commit); None unless both happened."""
    if not approval or approval.get("decision") != APPROVED or finished_at is None:
        return None
    return round((finished_at - datetime.fromisoformat(approval["answered_at"])).total_seconds(), 3)


def deadline_counts_from(began_at: datetime, approval: dict | None) -> datetime:
    """Where recovery's decision deadline starts for an undecided load: its answer, or the
    end of its wait for one (the timeout), or else the load's begin."""
    if not approval:
        return began_at
    return datetime.fromisoformat(approval.get("answered_at") or approval["timeout_at"])


@dataclass(frozen=True)
class ApprovalGate:
    """The vote's reasons from the load's approval: rejected, timed out or never answered,
    when the run asked for one (`required`)."""

    required: bool = False

    def reasons(self, load: Load) -> list[str]:
        return reasons_to_abort(load.approval, self.required)


def ask_approval(log: TransactionLog, load_id: str, timeout: timedelta, run: dict | None = None) -> Load | None:
    """Log that the load waits for a person's approval, at most `timeout`; the load as it
    is then. None when there is nothing to approve (the load is not PREPARED: prepare
    failed, or it was decided). Nothing is held on any target while it waits."""
    load = log.get(load_id)
    if load.state != State.PREPARED:
        return None
    if load.approval:
        return load  # a retried ask: the first one's wait, or its answer, stands
    log.record_approval(load_id, asked(datetime.now(timezone.utc), timeout, run))
    return log.get(load_id)


def answer_approval(log: TransactionLog, load_id: str, approved: bool, at: datetime, by: str | None = None,
                    by_id: str | None = None, timed_out: bool = False, run_ended: bool = False) -> Load:
    """Log the answer to the load's approval (the vote reads it); the load as it is then.
    A load decided meanwhile keeps its decision, and its approval stays as it was."""
    load = log.get(load_id)
    if load.state == State.PREPARED:
        log.record_approval(load_id, answered(load.approval or {}, approved, at, by, by_id, timed_out, run_ended))
    return log.get(load_id)


def waits_on_a_run(approval: dict | None) -> tuple[str, str] | None:
    """(dag id, run id) of the run whose task waits for this approval's answer; None when
    it was answered or no run is known."""
    if not approval or "decision" in approval or not approval.get("run"):
        return None
    return approval["run"]["dag_id"], approval["run"]["run_id"]
