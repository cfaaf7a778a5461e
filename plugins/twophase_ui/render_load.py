"""A load's page: where it spent its time, what it held on which target, and what reached each.

From the top: the load's state and why; its timeline drawn to scale (timeline.py); a card
per target (rows staged and visible, how it committed) and one for its input; the audit's
rules; its rejected lines by reason; the facts, votes and history; the raw JSON, folded.
Every value from the log is escaped.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from twophase.gates import approval
from twophase.ops.report import summarize
from twophase.sources import Range

from . import charts
from .charts import PALETTE, seconds_text
from .queries import LoadDetail, seconds
from .render import count, counts_cell, duration, e, marked_state, page, run_link, when
from .timeline import Span, Target, spans, targets_of

_COLOURS = {"prepare": PALETTE[0], "audit": PALETTE[6], "approval wait": PALETTE[3], "vote": PALETTE[1],
            "commit": PALETTE[2], "rollback": "#a0aec0", "exposure window": PALETTE[4], "staged": "#cbd5e0",
            "prepared transaction": "#f4a6a6", "committed (last resource)": PALETTE[2]}
_VERDICT = {"pass": "✓", "warn": "!", "error": "✗"}


def _json(value) -> str:
    return f"<pre>{e(json.dumps(value, indent=2, sort_keys=True, default=str))}</pre>"


def _clock(value: datetime) -> str:
    """A time to the millisecond (the timeline's table)."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _colour(span: Span) -> str:
    return _COLOURS.get(span.label.split(":")[0].split(" (")[0], _COLOURS.get(span.label, PALETTE[7]))


def _span_text(span: Span) -> str:
    return seconds_text(span.seconds) + (" so far" if span.ongoing else "") + (" (est.)" if span.estimated else "")


def timeline_section(detail: LoadDetail) -> str:
    """The load's timeline to scale, and the same spans as a table."""
    load = detail.load
    now = detail.now or datetime.now(timezone.utc)
    drawn = spans(load, detail.votes, now)
    end = max([load.finished_at or now] + [s.end for s in drawn])
    bars = [charts.Bar(s.lane, s.label, s.start, s.end, _colour(s),
                       f"{s.lane}: {s.label}, {_clock(s.start)} to {_clock(s.end)}, {_span_text(s)}"
                       + (f"; {s.note}" if s.note else ""), _span_text(s), s.estimated or s.ongoing)
            for s in drawn]
    total = seconds_text((end - load.began_at).total_seconds())
    caption = (f"The load's timeline, {total} from begin ({when(load.began_at)}) to "
               + (f"its end ({when(load.finished_at)})" if load.finished_at else "now (not finished)")
               + ", drawn to scale from the log's timestamps. Dashed: still going, or placed from a commit's "
                 "logged seconds (the log keeps how long each participant's commit took, not when it began).")
    svg = charts.timeline(bars, load.began_at, end, f"Timeline of load {load.load_id}: " + "; ".join(
        f"{s.lane} {s.label} {_span_text(s)}" for s in drawn))
    rows = "".join(
        f"<tr><td>{e(s.lane)}</td><td>{e(s.label)}</td><td class=\"ts\">{e(_clock(s.start))}</td>"
        f"<td class=\"ts\">{e(_clock(s.end)) if not s.ongoing else 'not yet'}</td>"
        f"<td class=\"num\">{e(_span_text(s))}</td><td>{e(s.note)}</td></tr>" for s in drawn)
    table = ('<details><summary>The timeline in numbers</summary><table class="timeline-table wrap"><tr><th>Lane</th>'
             f"<th>What</th><th>From</th><th>To</th><th>Took</th><th>Held, done</th></tr>{rows}</table></details>")
    return charts.figure(svg, caption) + table


def _targets_by_participant(targets: list[Target]) -> dict[str, list[Target]]:
    grouped: dict[str, list[Target]] = {}
    for t in targets:
        grouped.setdefault(t.participant, []).append(t)
    return grouped


def _how(load, target: Target, vote, last: str | None) -> list[tuple[str, str]]:
    """How the target commits (or committed): the facts the log keeps for its kind."""
    detail = (vote.committable if vote else None) or {}
    committed = load.state.value == "COMMITTED"
    undecided = load.state.value in ("PREPARING", "PREPARED")
    if target.kind == "postgres":
        tables = detail.get("tables") or {}
        replaced = (tables.get(target.name) or {}).get("deleted")
        facts = [("Mode", e(detail.get("mode", "-")) + (f", replacing {count(replaced)} rows" if replaced else ""))]
        if target.participant == last:
            facts.append(("Commit", "last resource: promoted in one local transaction, its COMMIT marker in "
                                    "twophase.decisions"))
        elif detail.get("gid") and load.exposed_at:
            fate = {"COMMITTED": "COMMIT PREPARED", "ABORTED": "ROLLBACK PREPARED"}.get(load.state.value, "held now")
            facts.append(("Prepared transaction", f"<code>{e(detail['gid'])}</code> ({fate})"))
        elif detail.get("gid"):
            facts.append(("Prepared transaction", "not yet: the vote takes it" if undecided else
                          "none: the vote never made it ready"))
        return facts
    if target.kind == "kafka":
        copies = [c for c in detail.get("topics") or [] if c.get("topic") == target.name]
        if not copies:
            return []
        copy = copies[0]
        ranges = ", ".join(f"[{p}] {r[0]:,}..{r[1]:,}" for p, r in (copy.get("ranges") or {}).items()) or "none"
        return [("Staging topic", f"<code>{e(copy.get('staging_topic'))}</code>"),
                ("Staged offsets", e(ranges)),
                ("Commit", "copied into the topic in one Kafka transaction" if committed else
                 "not yet" if undecided or load.state.value == "COMMITTING" else "none: rolled back")]
    if target.kind == "iceberg":
        files = detail.get("files") or []
        snapshot = ((load.outcomes or {}).get(target.participant) or {}).get("did", {}).get("snapshot")
        found = f"the table's snapshot whose summary has twophase.load_id = <code>{e(load.load_id)}</code>"
        return [("Staged files", f"{len(files):,} Parquet files in <code>{e(detail.get('directory', '-'))}</code>"),
                ("Snapshot", "none committed" if not committed else
                 f"<code>{e(snapshot)}</code>, {found}" if snapshot is not None else found)]
    return []


def _visible(load, target: Target, siblings: int) -> str:
    outcome = (load.outcomes or {}).get(target.participant)
    if load.state.value == "COMMITTED" and outcome:
        seen = count(outcome.get("count"))
        return seen if siblings == 1 else f"{seen} over {target.participant}'s {siblings} targets"
    if load.state.value in ("ABORTED", "ABORTING"):
        return "0 (rolled back)"
    return "0 (not committed yet)"


def _input_card(load) -> str:
    if load.source:
        facts = [("Source", _source(load)), ("Lag at begin", _lag_at_begin(load))]
    elif load.input:
        facts = [(e(k), e(v if isinstance(v, str) else json.dumps(v, default=str)[:300]))
                 for k, v in load.input.items()]
    else:
        facts = [("Input", "as the job found it (no source, no input recorded)")]
    return _card("input", "What the load read", facts)


def _card(kind: str, name: str, facts: list[tuple[str, str]]) -> str:
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    return f'<section class="card"><div class="kind">{e(kind)}</div><h3>{e(name)}</h3><dl>{dl}</dl></section>'


def cards_section(load, votes) -> str:
    """A card for the load's input, then one per target."""
    targets = targets_of(load)
    grouped = _targets_by_participant(targets)
    last = ((load.participants or {}).get("last_resource") or {}).get("participant")
    cards = [_input_card(load)]
    for t in targets:
        vote = votes.get(t.participant)
        staged = vote.counts_or_total().get(t.name) if vote else None
        outcome = (load.outcomes or {}).get(t.participant) or {}
        facts = [("Spark computed", count((load.expected or {}).get(t.name))),
                 ("Staged (vote)", count(staged) + (f" · {'yes' if vote.yes else 'NO: ' + e(vote.reason)}"
                                                    if vote else "")),
                 ("Visible", _visible(load, t, len(grouped[t.participant]))),
                 *_how(load, t, vote, last)]
        if outcome:
            facts.append(("Commit took", f"{duration(outcome.get('seconds'))} ({e(outcome.get('kind'))})"))
        facts.append(("Participant", e(t.participant) + (f" (connection {e(t.connection)})" if t.connection else "")))
        cards.append(_card(t.kind, t.name, facts))
    return f'<div class="cards">{"".join(cards)}</div>'


def audit_section(report: dict | None) -> str:
    """The audit report: its verdict, then a row per rule, each verdict with its glyph."""
    if report is None:
        return '<p class="muted">Not audited (the audit did not run).</p>'
    bound = lambda b: "any" if b["min"] is None and b["max"] is None else (  # noqa: E731
        f"{'' if b['min'] is None else b['min']}..{'' if b['max'] is None else b['max']}")
    verdict = lambda v: f'<span class="verdict-{e(v)}">{_VERDICT.get(v, "?")} {e(v)}</span>'  # noqa: E731
    rows = "".join(
        f"<tr><td>{e(r['rule'])}</td><td class=\"num\">{'-' if r['value'] is None else e(format(r['value'], 'g'))}"
        f"</td><td>{e(bound(r['warn']))}</td><td>{e(bound(r['error']))}</td>"
        f"<td>{verdict(r['verdict'])}</td><td>{e(r['detail'])}</td></tr>"
        for r in report["rules"])
    return (f"<p>Verdict: <strong>{verdict(report['verdict'])}</strong>, "
            f"{len(report['rules'])} rules, audited {e(report['audited_at'])}.</p>"
            + (f"<table><tr><th>Rule</th><th>Value</th><th>Warn outside</th><th>Error outside</th><th>Verdict</th>"
               f"<th>Detail</th></tr>{rows}</table>" if rows else ""))


def rejected_section(load, rejected) -> str:
    """Rejected lines by reason as bars (the job's counts, else what the quarantine kept),
    then each reason's first lines."""
    counted = load.metrics.get("rejected_by_reason") or {}
    kept = {r.reason: r for r in rejected}
    reasons = list(dict.fromkeys([*counted, *kept]))
    if not reasons:
        total = load.metrics.get("rejected_lines")
        said = "No line rejected." if not total else f"{total:,} lines rejected (no reasons logged)."
        return f'<p class="muted">{said}</p>'
    inputs = load.metrics.get("input_lines")
    share = lambda n: f" ({n / inputs:.1%} of {inputs:,} input lines)" if inputs else ""  # noqa: E731
    numbers = {r: counted.get(r, kept[r].kept if r in kept else 0) for r in reasons}
    reasons.sort(key=lambda r: -numbers[r])
    items = [(r, numbers[r], f"{numbers[r]:,} lines{share(numbers[r])}") for r in reasons]
    caption = (f"Rejected lines by reason: {sum(numbers.values()):,} lines, {len(reasons)} reasons"
               + (", counted by the job" if counted else ", as kept in the quarantine") + ".")
    svg = charts.hbars(items, caption)
    rows = "".join(
        f"<tr><td>{e(r)}</td><td class=\"num\">{count(counted.get(r))}</td>"
        f"<td class=\"num\">{count(kept[r].kept) if r in kept else '0'}</td><td>"
        + ("<br>".join(f"<code>{e(k.describe())}</code>" for k in kept[r].first) if r in kept else "-")
        + "</td></tr>" for r in reasons)
    table = ('<table class="wrap"><tr><th>Reason</th><th>Rejected</th><th>Kept</th><th>First lines kept</th></tr>'
             f"{rows}</table>")
    return charts.figure(svg, caption) + table


def _source_of(load):
    """The load's Source, or None when this release cannot rebuild its spec."""
    try:
        return load.spec().source
    except Exception:  # noqa: BLE001 - an older or newer spec: the page shows what it can without it
        return None


def _source(load) -> str:
    """What the load reads of its source, fixed at begin (the source's own words), or '-'."""
    if not load.source:
        return "-"
    try:
        return e(_source_of(load).describe(Range.from_json(load.source_range)))
    except Exception:  # noqa: BLE001 - a spec or range this release cannot rebuild: its key still says which source
        return e(load.source)


def _lag_at_begin(load) -> str:
    """How far the source was ahead of the load's range when begin fixed it, or '-'."""
    behind = (load.source_range or {}).get("behind")
    if behind is None:
        return "-"
    unit = getattr(_source_of(load), "unit", "record(s)")
    return (f"{behind:,} {unit} after its range when begin fixed it ({e(when(load.began_at))}); "
            "the pipeline's page asks the source for the lag now")


def _facts(detail: LoadDetail, pipeline_url: str) -> str:
    load, votes = detail.load, detail.votes
    summarized = summarize(load.__dict__, votes.values())
    expected = load.expected if load.expected is not None else (
        {"all targets": load.expected_rows} if load.expected_rows is not None else {})
    summary = [
        ("Load", e(load.load_id)),
        ("Pipeline", f'<a href="{e(pipeline_url)}">{e(load.pipeline)}</a>'),
        ("DAG run", run_link(load.dag_id or load.pipeline, load.run_id)),
        ("Decision", e(load.decision) or "-"),
        ("Reason", e(load.reason) or "-"),
        ("Commit", e(summarized.describe_last_resource())
         or "every participant prepares (the vote makes each ready, then logs the decision)"),
        ("Data interval", f"{e(when(load.data_interval_start))} – {e(when(load.data_interval_end))}"
         if load.data_interval_start else "-"),
        ("Source", _source(load)),
        ("Source lag at begin", _lag_at_begin(load)),
        ("Spark rows", counts_cell(expected)),
        ("Staged (votes)", counts_cell(summarized.counts)),
        ("Began", e(when(load.began_at))),
        ("Prepared", e(when(load.prepared_at)) or "-"),
        ("Decided", e(when(load.decided_at)) or "-"),
        ("Finished", e(when(load.finished_at)) or "-"),
        ("Phase timings", f"prepare {duration(seconds(load.began_at, load.prepared_at))}, "
                          f"vote {duration(seconds(load.prepared_at, load.decided_at))}, "
                          f"phase 2 {duration(seconds(load.decided_at, load.finished_at))}"),
        ("Exposure window", f"{duration(seconds(load.exposed_at, load.finished_at))}"
                            + (f" (from {e(when(load.exposed_at))}: locks and prepared transactions held from the "
                               "vote's ready to the end of phase 2)" if load.exposed_at else
                               " (never exposed: nothing was held on a target)")),
        ("Approval", e(approval.describe(load.approval)) if load.approval else "not asked"),
    ]
    return '<dl class="summary">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in summary) + "</dl>"


def _votes(votes) -> str:
    if not votes:
        return '<p class="muted">No votes yet.</p>'
    rows = "".join(
        f"<tr><td>{e(v.participant)}</td><td class=\"{'yes' if v.yes else 'no'}\">{'yes' if v.yes else 'no'}</td>"
        f'<td class="counts">{counts_cell(v.counts_or_total())}</td><td>{e(v.summary)}</td><td>{e(v.reason)}</td></tr>'
        for v in votes.values())
    return ('<table class="wrap"><tr><th>Participant</th><th>Vote</th><th>Counts per target</th><th>Summary</th>'
            "<th>Reason</th>"
            f"</tr>{rows}</table>")


def _history(history) -> str:
    rows = "".join(
        f"<tr><td>{e(t.from_state) or '-'}</td><td><span class=\"state {e(t.to_state)}\">{e(t.to_state)}</span></td>"
        f'<td>{e(t.reason)}</td><td class="ts">{e(_clock(t.at))}</td></tr>' for t in history)
    return f'<table class="wrap"><tr><th>From</th><th>To</th><th>Reason</th><th>At</th></tr>{rows}</table>'


def _raw(detail: LoadDetail) -> str:
    load = detail.load
    parts = [("Commit data (votes)", {n: v.committable for n, v in detail.votes.items()}),
             ("Metrics", load.metrics), ("Input", load.input), ("Source range", load.source_range),
             ("Participants", load.participants), ("Commit outcomes", load.outcomes), ("Approval", load.approval),
             ("Audit report", load.audit)]
    inner = "".join(f"<h3>{e(name)}</h3>{_json(value)}" for name, value in parts if value not in (None, {}, []))
    error = f"<h3>Prepare error</h3><pre>{e(load.prepare_error)}</pre>" if load.prepare_error else ""
    return f"<details><summary>Raw JSON: commit data, metrics, input, participants</summary>{error}{inner}</details>"


def load_page(detail: LoadDetail, *, list_url: str, pipeline_url: str) -> str:
    load = detail.load
    end = load.finished_at or detail.now or datetime.now(timezone.utc)
    so_far = "" if load.finished_at else " so far"
    exposed = seconds(load.exposed_at, end)
    lede = (f'<div class="lede"><span class="big">{marked_state(load.state.value)}</span>'
            + (f"<span>decision <strong>{e(load.decision)}</strong></span>" if load.decision else "")
            + f"<span>took <strong>{seconds_text(seconds(load.began_at, end))}</strong>{so_far}</span>"
            + f"<span>exposed <strong>{'-' if exposed is None else seconds_text(exposed)}</strong>"
            + f"{so_far if exposed is not None else ''}</span>"
            + f"<span>run {run_link(load.dag_id or load.pipeline, load.run_id)}</span></div>"
            + (f'<p class="reason">{e(load.reason)}</p>' if load.reason else "")
            + (f'<p class="reason">{e(approval.describe(load.approval))}: answer it in Airflow, on the run\'s '
               "required action</p>" if load.approval and "decision" not in load.approval and not load.decided_at
               else ""))
    body = (
        f'<nav class="crumbs"><a href="{e(list_url)}">← Transactions</a>'
        f'<a href="{e(pipeline_url)}">Pipeline {e(load.pipeline)}</a></nav>'
        f"<h1>Load {e(load.load_id)}</h1>{lede}"
        f"<h2>Timeline</h2>{timeline_section(detail)}"
        f"<h2>Targets</h2>{cards_section(load, detail.votes)}"
        f"<h2>Audit</h2>{audit_section(load.audit)}"
        f"<h2>Rejected lines</h2>{rejected_section(load, detail.rejected)}"
        f"<h2>Facts</h2>{_facts(detail, pipeline_url)}"
        f"<h2>Votes</h2>{_votes(detail.votes)}"
        f"<h2>History</h2>{_history(detail.history)}"
        f"<h2>Raw</h2>{_raw(detail)}"
    )
    return page(f"Load {load.load_id}", body)

