"""The audit report: every rule with its measured value, thresholds and verdict; the rows
per target; the rejected lines by reason; the load's verdict (the worst rule's). Stored
with the load (twophase.loads.audit), printed by the audit task, shown by
`python -m twophase show LOAD --audit` and the Transactions page, carried in the commit's
asset events. Its JSON follows report.schema.json (next to this file)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .limits import ERROR, WARN, Bounds, worst
from .rules import Result

SCHEMA = Path(__file__).with_name("report.schema.json")
VERSION = 1


@dataclass(frozen=True)
class AuditReport:
    load_id: str
    results: tuple[Result, ...]
    rows: dict[str, int]                      # per target: rows Spark computed (= what was staged)
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    audited_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())

    @property
    def verdict(self) -> str:
        return worst(r.verdict for r in self.results)

    def to_json(self) -> dict:
        return {"version": VERSION, "load_id": self.load_id, "verdict": self.verdict, "audited_at": self.audited_at,
                "rules": [r.to_json() for r in self.results], "rows": dict(self.rows),
                "rejected_by_reason": dict(self.rejected_by_reason)}

    @classmethod
    def from_json(cls, report: dict) -> "AuditReport":
        """A stored report (to_json's form) back as a report, e.g. to print its lines."""
        results = tuple(Result(r["rule"], r["kind"], r["target"], r["value"], Bounds(**r["warn"]),
                               Bounds(**r["error"]), r["verdict"], r["detail"]) for r in report["rules"])
        return cls(report["load_id"], results, dict(report["rows"]), dict(report["rejected_by_reason"]),
                   report["audited_at"])

    def summary(self) -> dict:
        """What an asset event's extra carries: the verdict and each rule's."""
        return audit_summary(self.to_json())

    def lines(self) -> list[str]:
        """The report for a person, one line each (the task log)."""
        warned = sum(1 for r in self.results if r.verdict == WARN)
        failed = sum(1 for r in self.results if r.verdict == ERROR)
        out = [f"audit of load {self.load_id}: {self.verdict.upper()} ({len(self.results)} rules: "
               f"{len(self.results) - warned - failed} pass, {warned} warn, {failed} error)"]
        out += [f"  {r.describe()}" for r in self.results]
        out.append("  rows per target: " + (", ".join(f"{t} {n}" for t, n in self.rows.items()) or "none"))
        if self.rejected_by_reason:
            out.append("  rejected lines: " + ", ".join(f"{n} {why}" for why, n in self.rejected_by_reason.items()))
        return out


def audit_summary(report: dict | None) -> dict | None:
    """A stored report's verdict and each rule's verdict (None: not audited)."""
    if report is None:
        return None
    return {"verdict": report["verdict"], "rules": {r["rule"]: r["verdict"] for r in report["rules"]}}


def audit_reasons(report: dict | None, required: bool) -> list[str]:
    """The vote's reasons to abort from a stored report (its rules at error); a missing
    report is one when the audit is `required`."""
    if report is None:
        return ["the audit did not run (its task failed or never ran), so the rules were not checked"] if required \
            else []
    return [f"audit: {r['rule']} is {'not measured' if r['value'] is None else format(r['value'], 'g')}, outside "
            f"{_bounds(r['error'])}" + (f" ({r['detail']})" if r["detail"] else "")
            for r in report["rules"] if r["verdict"] == ERROR]


def _bounds(b: dict) -> str:
    from .limits import Bounds

    return Bounds(b["min"], b["max"]).describe()


def schema() -> dict:
    return json.loads(SCHEMA.read_text())
