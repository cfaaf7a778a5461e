"""The approve task: a person approves or rejects the audited load before the vote.

Airflow's human-in-the-loop ApprovalOperator (the standard provider) with what a
two-phase load needs around it:

- asked only when the run's trigger form says so (param `approval`, off by default); a run
  without it passes through at once and its vote does not ask for an answer;
- the request shows the audit report and the rows per target, and times out after the
  run's `approval_timeout_minutes`; an unanswered request is rejected (the default);
- the question and the answer are logged with the load (twophase.gates.approval: who, when,
  timed out or not), so the vote, recovery and `python -m twophase show` read them;
- a rejection does not skip what follows, as the stock operator does: the vote must run
  to log the decision (ABORT, naming who rejected) and pick the rollback.

While the person decides, the load holds nothing on any target: no participant is made
ready before the vote.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator

from twophase.audit.report import AuditReport
from twophase.gates import approval
from twophase.log import Load
from twophase.protocol import coordinator

from .config import LoadConfig
from .errors import airflow_outcome
from .tasks import the_load, quality_gates

log = logging.getLogger("twophase")


class LoadApprovalOperator(ApprovalOperator):
    def __init__(self, *, load: LoadConfig, pipeline: str, **kwargs) -> None:
        super().__init__(subject="Publish this load?", defaults=ApprovalOperator.REJECT, **kwargs)
        self.load = load
        self.pipeline = pipeline

    def execute(self, context) -> Any:
        params = context["params"]
        if not params.get("approval"):
            log.info("no approval asked: the run's param approval is off; the vote follows at once")
            return None
        lid, _, txlog = the_load(self.load, self.pipeline, context)
        with airflow_outcome("approval", lid):
            load = approval.ask_approval(txlog, lid, timedelta(minutes=float(params.get("approval_timeout_minutes", 60))),
                                         run={"dag_id": self.dag_id, "run_id": context["run_id"]})
        if load is None:
            log.info("nothing to approve: load %s is not waiting for a decision; the vote aborts it", lid)
            return None
        if "decision" in load.approval:
            log.info("load %s was answered before this retry: %s", lid, approval.describe(load.approval))
            return None
        # A retry waits only what is left of the first ask's wait.
        now = datetime.now(timezone.utc)
        self.response_timeout = datetime.fromisoformat(load.approval["timeout_at"]) - now
        if self.response_timeout <= timedelta(0):
            with airflow_outcome("approval", lid):
                load = approval.answer_approval(txlog, lid, False, now, timed_out=True)
            log.info("load %s: %s", lid, approval.describe(load.approval))
            return None
        self.subject = f"Publish load {lid}?"
        gates = [reason for gate in quality_gates(params)
                 if (reason := gate(load.expected_rows or 0, load.metrics, {})) is not None]
        self.body = request_body(load, gates)
        if context["ti"].try_number > 1:
            # Airflow 3.3 can lose an answer given while it still records the end of the
            # request's first try (it then retries the task); the person must answer again.
            # Airflow keeps the first request's text when the retry keeps the task instance,
            # so only this log can say it.
            log.warning("asking again (try %d of the approve task): an answer to the earlier request, if one was "
                        "given, did not reach this task; answer again", context["ti"].try_number)
        log.info("waiting for a person to approve or reject load %s (%s); it holds nothing on its targets meanwhile",
                 lid, approval.describe(load.approval))
        log.info("answer in the Airflow UI (the run's Required Actions) or the REST API (hitlDetails of this task)")
        return super().execute(context)

    def execute_complete(self, context, event: dict[str, Any]) -> Any:
        # The base HITL operator's checks only: ApprovalOperator's own would skip the vote
        # on a rejection, and the vote must run to roll the load back.
        answer = HITLOperator.execute_complete(self, context, event)
        lid, _, txlog = the_load(self.load, self.pipeline, context)
        user = answer["responded_by_user"] or {}
        at = answer["responded_at"]
        at = at if isinstance(at, datetime) else datetime.fromisoformat(str(at))
        with airflow_outcome("approval", lid):
            load = approval.answer_approval(
                txlog, lid, answer["chosen_options"] == [self.APPROVE], at.astimezone(timezone.utc),
                by=user.get("name"), by_id=user.get("id"), timed_out=bool(event.get("timedout")))
        log.info("load %s: %s", lid, approval.describe(load.approval))
        return answer


def request_body(load: Load, gates_failed: list[str]) -> str:
    """What the person reads before answering (Markdown): the audit, the rows, the run's
    quality gates the vote will fail the load on whatever the answer, what follows."""
    report = AuditReport.from_json(load.audit).lines() if load.audit else ["the load was not audited"]
    timeout = load.approval["timeout_at"] if load.approval else "its timeout"
    return "\n".join([
        f"Load **{load.load_id}** of pipeline {load.pipeline}, data interval {load.data_interval_start} .. "
        f"{load.data_interval_end}, is staged and audited. Nothing is published yet, and nothing is held on "
        "its targets while this waits.",
        "",
        f"**{report[0]}**",
        "",
        *(f"- {line.strip()}" for line in report[1:]),
        "",
        *([f"**The vote will abort this load whatever the answer**: {'; '.join(gates_failed)}.", ""]
          if gates_failed else ["The run's quality gates pass.", ""]),
        f"**Approve**: the vote makes the targets ready and the load commits. **Reject**, or no answer by "
        f"{timeout}: the load is rolled back and nothing reaches its targets.",
        "",
        f"Details: `python -m twophase show {load.load_id} --audit`.",
    ])
