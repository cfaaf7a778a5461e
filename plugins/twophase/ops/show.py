"""What a load shows a person: `python -m twophase show LOAD`, and the pipeline's finish task.

`facts` gathers everything the log knows of a load (and how far its source is ahead now)
as one dict, which `show --json` prints; `render` makes one screen of it: the load's state
and why, what it read and wrote, how long each phase took, each vote, and its history. One
dict for both, so the text and the JSON never disagree."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from ..audit.report import audit_summary
from ..errors import root_cause
from ..gates import approval
from ..protocol import sourcing
from ..protocol.states import TERMINAL
from ..sources import Range
from ..spec import last_resource_line
from . import recovery, report


def facts(log, load, conns) -> dict:
    """Everything the log knows of `load`, with its source's lag asked through `conns`."""
    votes = log.votes(load.load_id)
    return {
        **report.summarize(load.__dict__, votes.values()).to_json(), "participants": load.participants,
        "input": load.input, **_source(log, load, conns), "expected_rows": load.expected_rows, "metrics": load.metrics,
        "prepare_error": load.prepare_error, "prepare_attempts": load.prepare_attempt,
        "audit": audit_summary(load.audit),
        "approval": load.approval, "approval_to_visible_s": approval.to_visible_s(load.approval, load.finished_at),
        "votes": {name: v.to_json() for name, v in votes.items()},
        "history": [{"from": t.from_state, "to": t.to_state, "reason": t.reason, "at": t.at.isoformat()}
                    for t in log.history(load.load_id)],
        **_recovery(load),
    }


def _recovery(load) -> dict:
    """What recovery would do with the load now (recovery.outlook), while it is not finished."""
    if load.state in TERMINAL:
        return {}
    seen = recovery.outlook(load, datetime.now(timezone.utc))
    return {"recovery": {"acts_now": seen.acts, "says": seen.says}}


def _source(log, load, conns) -> dict:
    """The load's source and range, and how far its source is ahead of the last committed
    load now (lag: None when the source cannot be asked)."""
    spec = load.spec()
    if spec.source is None or load.source_range is None:
        return {}
    fixed = Range.from_json(load.source_range)
    return {"source": spec.source.describe(fixed), "source_range": load.source_range,
            "source_lag": lag(log, conns, load.source)}


def lag(log, conns, key: str) -> int | str:
    """How far source `key` is ahead of its committed loads and skips now (records or files,
    an upper bound for Kafka: offsets); what kept it from telling, when it cannot."""
    loads = log.of_source(key)
    try:
        behind = loads[-1].spec().source.open(conns).lag(sourcing.consumed(loads, log.skips(key)))
    except Exception as exc:  # noqa: BLE001 - the source's server down: say so, show the rest
        return f"unknown: {root_cause(exc)}"
    return "unknown" if behind is None else behind


WIDTH = 10  # the labels' column


def render(shown: dict) -> str:
    """The text of `shown`, the dict `show --json` prints."""
    lines = [_row("load", shown["load_id"]),
             _row("pipeline", f"{shown['pipeline']}, run {shown['run_id']}"),
             _row("state", shown["state"] + (f" (decision {shown['decision']})" if shown.get("decision") else "")
                  + (f": {shown['reason']}" if shown.get("reason") else ""))]
    if shown.get("data_interval_start"):
        lines.append(_row("interval", f"{shown['data_interval_start']} .. {shown['data_interval_end']}"))
    lines.append(_row("input", _input(shown)))
    if shown.get("last_resource"):
        lines.append(_row("commit", last_resource_line(shown["last_resource"]["participant"],
                                                       shown["last_resource"]["why"])))
    if shown.get("prepare_error"):
        lines.append(_row("prepare", f"failed: {shown['prepare_error']}"))
    if shown.get("expected"):
        lines.append(_row("rows", "Spark computed " + _counts(shown["expected"])))
    lines.append(_row("timings", _timings(shown)))
    if shown.get("metrics"):
        lines.append(_row("metrics", " · ".join(f"{k} {_value(v)}" for k, v in shown["metrics"].items())))
    lines.append(_row("audit", _audit(shown.get("audit"))))
    lines.append(_row("approval", approval.describe(shown["approval"]) if shown.get("approval") else "not asked"))
    if shown.get("recovery"):
        lines.append(_row("waits for", shown["recovery"]["says"]))
    if shown.get("votes"):
        lines.append("votes")
        width = max(map(len, shown["votes"]))
        for name, vote in shown["votes"].items():
            said = vote.get("summary") if vote["yes"] else vote.get("reason")
            lines.append(f"  {name:<{width}}  {'YES' if vote['yes'] else 'NO':<3}  {vote['count']:>12,}  {said or ''}"
                         .rstrip())
    if shown.get("history"):
        lines.append("history")
        for t in shown["history"]:
            move = f"{t['from']} -> {t['to']}" if t.get("from") else t["to"]
            lines.append(f"  {t['at']}  {move}" + (f": {t['reason']}" if t.get("reason") else ""))
    lines.append(_row("more", f"python -m twophase show {shown['load_id']} --json (all of it) · --audit (the audit's "
                              "report) · --rejected (the quarantined lines)"))
    return "\n".join(lines)


def _row(label: str, text: str) -> str:
    return f"{label:<{WIDTH}}{text}"


def _input(shown: dict) -> str:
    if shown.get("source"):
        behind = shown.get("source_lag")
        if isinstance(behind, int):
            return shown["source"] + f"; the source is {behind:,} ahead of its committed loads now"
        return shown["source"] + ("" if behind is None else f"; how far the source is ahead now: {behind}")
    return json.dumps(shown.get("input") or {}, default=str) if shown.get("input") else "as the job found it"


def _timings(shown: dict) -> str:
    parts = [f"{name} {_seconds(shown.get(key))}" for name, key in
             (("prepare", "prepare_s"), ("vote", "vote_s"), ("phase 2", "phase2_s"), ("exposure", "exposure_s"))]
    attempts = shown.get("prepare_attempts") or 0
    return " · ".join(parts) + (f" ({attempts} prepare attempts)" if attempts > 1 else "")


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _counts(counts: dict) -> str:
    return " · ".join(f"{target} {_value(n)}" for target, n in counts.items())


def _value(v) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return json.dumps(v, default=str) if isinstance(v, (dict, list)) else str(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def _audit(summary: dict | None) -> str:
    if summary is None:
        return "not audited"
    rules = ", ".join(f"{rule} {verdict}" for rule, verdict in summary["rules"].items())
    return f"{summary['verdict']}" + (f" ({rules})" if rules else "")
