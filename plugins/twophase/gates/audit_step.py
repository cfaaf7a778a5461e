"""The audit's step and its gate: measure a pipeline's rules (twophase.audit) on a load's
staged data between prepare and vote, store the report with the load, and keep the staged
rows failing each rule in the quarantine; the vote aborts on a rule at error (AuditGate)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..audit import PASS, AuditInput, AuditReport
from ..audit.report import audit_reasons
from ..connections import Connections
from ..errors import ServerUnreachable, root_cause
from ..log import Load, TransactionLog
from ..protocol.coordinator import step
from ..protocol.states import State
from . import quarantine


@dataclass(frozen=True)
class AuditGate:
    """The vote's reasons from the audit's stored report: its rules at error; a missing
    report is one too when the audit is `required` (the DAG's audit task always runs)."""

    required: bool = False

    def reasons(self, load: Load) -> list[str]:
        return audit_reasons(load.audit, self.required)


def audit(log: TransactionLog, conns: Connections, load_id: str, rules=(),
          quarantine_cap: int = quarantine.DEFAULT_CAP) -> AuditReport | None:
    """Measure the pipeline's audit rules (twophase.audit) on the load's staged data, where
    it was staged, without moving it or taking anything a writer needs; store the report
    with the load (the vote reads its verdict) and keep the staged rows failing each rule
    that did not pass in the quarantine (the rule's name as the reason, at most
    `quarantine_cap` rows per rule). None when there is nothing to audit (the load is not
    PREPARED: prepare failed, or it was decided). Repeatable until the decision. A server
    down: RetryLater."""
    with step(log, load_id, conns) as (load, parts):
        if load.state != State.PREPARED:
            return None
        votes = log.votes(load_id)
        owner = {t: p for p in parts for t in p.targets}
        found: dict = {}

        def staged(target: str):
            if target not in found:
                p = owner.get(target)
                found[target] = p.staged_rows(votes[p.name], target) if p is not None and p.name in votes else None
            return found[target]

        previous = log.last_committed(load.pipeline, load_id)
        measured = AuditInput(load.expected or {}, load.metrics, staged, previous.expected if previous else None)
        report = AuditReport(load_id, tuple(rule.check(measured) for rule in rules), dict(load.expected or {}),
                             dict(load.metrics.get("rejected_by_reason") or {}))
        if log.record_audit(load_id, report.to_json()):
            _quarantine_failing(log, load_id, rules, report, measured, quarantine_cap)
        return report


def _quarantine_failing(log: TransactionLog, load_id: str, rules, report: AuditReport, measured: AuditInput,
                        cap: int) -> None:
    """The rows each row-level rule that did not pass counted, into the quarantine in place
    of an earlier audit's: reason the rule, source the target, content the row as JSON."""
    kept, reasons = [], []
    for rule, result in zip(rules, report.results):
        if result.value is None or result.verdict == PASS:
            reasons.append(rule.name)  # an earlier audit's rows of it are no longer the load's
            continue
        try:
            rows = rule.failing(measured, cap)
        except ServerUnreachable:
            raise
        except Exception as exc:  # noqa: BLE001 - said in the quarantine itself: never dropped without a word
            rows, why = [], f"its rows could not be read: {root_cause(exc)}"
            kept.append(quarantine.Kept(rule.name, result.target, why, None))
        if rows is None:
            continue
        reasons.append(rule.name)
        kept += [quarantine.Kept(rule.name, result.target, f"{result.verdict} of audit rule {rule.name}",
                                 json.dumps(row, default=str, sort_keys=True)) for row in rows]
    if reasons:
        log.quarantine(load_id, kept, reasons)
