"""The Transactions page's HTML: server-rendered, every value from the log escaped."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from html import escape
from typing import Callable, Iterable

from twophase.gates import approval
from twophase.protocol.states import State
from twophase.sources import Range

from .links import dag_run_url
from twophase.ops.report import LoadSummary, summarize

from .queries import LoadDetail, seconds

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 16px; color: #1a202c; }
h1 { font-size: 20px; margin: 0 0 12px; } h2 { font-size: 16px; margin: 20px 0 8px; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #e2e8f0; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f7fafc; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.ts { font-variant-numeric: tabular-nums; white-space: nowrap; }
td.id { font-family: ui-monospace, monospace; font-size: 12px; min-width: 14em; overflow-wrap: anywhere; }
td.id .run { display: block; margin-top: 2px; color: #4a5568; }
td.reason { min-width: 12em; overflow-wrap: anywhere; }
td.reason .clamp { display: -webkit-box; -webkit-line-clamp: 3; -webkit-box-orient: vertical; overflow: hidden; }
table.loads { table-layout: fixed; } table.loads td { overflow-wrap: anywhere; }
col.began { width: 7.5em; } col.id { width: 15em; } col.pipeline { width: 9em; } col.state { width: 7.5em; }
col.num { width: 5.5em; } col.reason { width: 24%; }
td.began { font-variant-numeric: tabular-nums; min-width: 6.5em; }
td.counts { font-variant-numeric: tabular-nums; min-width: 12em; }
td.counts .count { white-space: nowrap; } td.counts .target { color: #4a5568; }
th.target { max-width: 12em; text-align: right; }
.scroll { overflow-x: auto; }
pre { background: #f7fafc; border: 1px solid #e2e8f0; padding: 8px; overflow-x: auto; white-space: pre-wrap; margin: 0; }
.state { font-weight: 600; white-space: nowrap; }
.COMMITTED { color: #2f855a; } .ABORTED { color: #718096; } .VIOLATED { color: #c53030; }
.PREPARING, .PREPARED, .COMMITTING, .ABORTING { color: #b7791f; }
.yes { color: #2f855a; font-weight: 600; } .no { color: #c53030; font-weight: 600; }
.verdict-pass { color: #2f855a; font-weight: 600; } .verdict-warn { color: #b7791f; font-weight: 600; } .verdict-error { color: #c53030; font-weight: 600; }
form.filters { margin: 0 0 12px; display: flex; gap: 12px; align-items: end; flex-wrap: wrap; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: #4a5568; }
dl.summary { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 0; }
dl.summary dt { color: #4a5568; } dl.summary dd { margin: 0; }
.muted { color: #718096; }
"""

# Inside Airflow the page is an iframe sandboxed without top navigation: a link to a DAG
# run then asks the Airflow UI (same origin) to route to it; anywhere else it is a link.
_SCRIPT = """
document.addEventListener("click", function (ev) {
  var a = ev.target.closest ? ev.target.closest("a[data-airflow-ui]") : null;
  if (!a || window.top === window || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
  try {
    window.top.history.pushState(null, "", a.getAttribute("href"));
    window.top.dispatchEvent(new PopStateEvent("popstate", {state: null}));
    ev.preventDefault();
  } catch (e) { /* not allowed: the link opens in this frame */ }
});
"""


def e(value) -> str:
    return escape("" if value is None else str(value))


def when(value: datetime | None) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def duration(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _json(value) -> str:
    return f"<pre>{e(json.dumps(value, indent=2, sort_keys=True, default=str))}</pre>"


def page(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{_CSS}</style></head><body>{body}<script>{_SCRIPT}</script></body></html>")


def message_page(title: str, message: str, link: tuple[str, str] | None = None) -> str:
    extra = f'<p><a href="{e(link[0])}">{e(link[1])}</a></p>' if link else ""
    return page(title, f"<h1>{e(title)}</h1><p>{e(message)}</p>{extra}")


def _run_link(pipeline: str, run_id: str) -> str:
    return f'<a data-airflow-ui href="{e(dag_run_url(pipeline, run_id))}">{e(run_id)}</a>'


def _state(state: str) -> str:
    return f'<span class="state {e(state)}">{e(state)}</span>'


def _options(values: Iterable[str], selected: str | None, any_label: str) -> str:
    items = [f'<option value="">{e(any_label)}</option>']
    items += [f'<option value="{e(v)}"{" selected" if v == selected else ""}>{e(v)}</option>' for v in values]
    return "".join(items)


# A column per target when the page shows one pipeline with at most this many targets;
# otherwise one cell per load lists its targets and counts.
MAX_TARGET_COLUMNS = 4


def _targets(rows: list[LoadSummary]) -> list[str] | None:
    """The page's targets, in order of first appearance, when they fit a column each."""
    if len({r.pipeline for r in rows}) != 1:
        return None
    targets: dict[str, None] = {}
    for r in rows:
        targets.update(dict.fromkeys(r.counts))
    return list(targets) if 0 < len(targets) <= MAX_TARGET_COLUMNS else None


def breakable(name: str) -> str:
    """A target's name, escaped, that may wrap after its '.', '_' and '-' only."""
    return re.sub(r"([._-])", r"\1<wbr>", e(name))


def counts_cell(counts: dict[str, int]) -> str:
    """ "analytics.customer_daily_totals 5,000 · customer-daily-totals 5,000", escaped; a
    line may break between targets, never inside one."""
    if not counts:
        return "-"
    return " · ".join(f'<span class="count"><span class="target">{e(t)}</span> {count(n)}</span>'
                      for t, n in counts.items())


def list_page(rows: list[LoadSummary], *, detail_url: Callable[[str], str], pipelines: list[str],
              pipeline: str | None, state: str | None, limit: int) -> str:
    filters = (
        '<form class="filters" method="get">'
        f'<label>Pipeline<select name="pipeline">{_options(pipelines, pipeline, "all")}</select></label>'
        f'<label>State<select name="state">{_options([s.value for s in State], state, "all")}</select></label>'
        f'<label>Newest<input type="number" name="limit" min="1" value="{limit}" style="width:6em"></label>'
        '<button type="submit">Show</button></form>'
    )
    targets = _targets(rows)
    if targets is None:
        count_heads = '<th title="what each target staged, from the participants\' votes">Counts per target</th>'
        counts_of = lambda r: f'<td class="counts">{counts_cell(r.counts)}</td>'  # noqa: E731
    else:
        count_heads = "".join(f'<th class="target">{breakable(t)}</th>' for t in targets)
        counts_of = lambda r: "".join(f'<td class="num">{count(r.counts.get(t))}</td>' for t in targets)  # noqa: E731
    # The columns a person scans first; the phases' timings are each row's title, and all of
    # it is on the load's page. One pipeline chosen: its name is in the filter, not a column.
    by_pipeline = "" if pipeline else "<th>Pipeline</th>"
    # Fixed widths (table.loads): long names and reasons wrap inside their column, so the
    # table is never wider than the screen; the counts take what is left.
    cols = ('<colgroup><col class="began"><col class="id">' + ("" if pipeline else '<col class="pipeline">')
            + '<col class="state">' + '<col class="counts">' * (len(targets) if targets else 1)
            + '<col class="num"><col class="num"><col class="reason"></colgroup>')
    head = ("<tr><th>Began</th><th>Load / DAG run</th>" + by_pipeline + "<th>State</th>"
            f"{count_heads}"
            '<th title="from begin to the end of phase 2; each phase on the row\'s title and the load\'s page">'
            "Took</th>"
            '<th title="from the vote making participants ready (locks, a prepared transaction) to the end of '
            'phase 2\">Exposed</th>'
            "<th>Reason</th></tr>")
    body = "".join(
        f'<tr title="{e(_phases(r))}">'
        f'<td class="began">{e(when(r.began_at))}</td>'
        f'<td class="id"><a href="{e(detail_url(r.load_id))}">{e(r.load_id)}</a>'
        f'<span class="run">run {_run_link(r.pipeline, r.run_id)}</span></td>'
        + ("" if pipeline else f"<td>{e(r.pipeline)}</td>")
        + f"<td>{_state(r.state)}</td>"
        f"{counts_of(r)}"
        f'<td class="num">{duration(seconds(r.began_at, r.finished_at))}</td>'
        f'<td class="num">{duration(r.exposure_s)}</td>'
        f'<td class="reason"><div class="clamp" title="{e(r.reason)}">{e(r.reason)}</div></td>'
        "</tr>"
        for r in rows
    )
    shown = (f'<p class="muted">{len(rows)} loads, newest first'
             f'{" (the newest " + str(limit) + ")" if len(rows) == limit else ""}.</p>')
    table = (f'<div class="scroll"><table class="loads">{cols}{head}{body}</table></div>' if rows
             else '<p class="muted">No loads in the transaction log match.</p>')
    return page("Transactions", f"<h1>Transactions</h1>{filters}{shown if rows else ''}{table}")


def _phases(r: LoadSummary) -> str:
    """A row's title: each phase's time, and the decision."""
    return (f"prepare {duration(r.prepare_s)}, vote {duration(r.vote_s)}, phase 2 {duration(r.phase2_s)}"
            + (f"; decision {r.decision}" if r.decision else "; not decided yet"))


def _audit(report: dict | None) -> str:
    """The audit report: its verdict, then a row per rule."""
    if report is None:
        return '<p class="muted">Not audited (the audit did not run).</p>'
    bound = lambda b: "any" if b["min"] is None and b["max"] is None else (  # noqa: E731
        f"{'' if b['min'] is None else b['min']}..{'' if b['max'] is None else b['max']}")
    rows = "".join(
        f"<tr><td>{e(r['rule'])}</td><td class=\"num\">{'-' if r['value'] is None else e(format(r['value'], 'g'))}</td>"
        f"<td>{e(bound(r['warn']))}</td><td>{e(bound(r['error']))}</td>"
        f"<td class=\"verdict-{e(r['verdict'])}\">{e(r['verdict'])}</td><td>{e(r['detail'])}</td></tr>"
        for r in report["rules"])
    return (f"<p>Verdict: <strong class=\"verdict-{e(report['verdict'])}\">{e(report['verdict'])}</strong>, "
            f"{len(report['rules'])} rules, audited {e(report['audited_at'])}.</p>"
            + (f"<table><tr><th>Rule</th><th>Value</th><th>Warn outside</th><th>Error outside</th><th>Verdict</th>"
               f"<th>Detail</th></tr>{rows}</table>" if rows else ""))


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
            "<code>python -m twophase status</code> asks the source for the lag now")


def detail_page(detail: LoadDetail, *, list_url: str) -> str:
    load, votes, history = detail.load, detail.votes, detail.history
    summarized = summarize(load.__dict__, votes.values())
    staged = summarized.counts
    expected = load.expected if load.expected is not None else (
        {"all targets": load.expected_rows} if load.expected_rows is not None else {})
    summary = [
        ("Load", e(load.load_id)),
        ("Pipeline", e(load.pipeline)),
        ("DAG run", _run_link(load.pipeline, load.run_id)),
        ("State", _state(load.state.value)),
        ("Decision", e(load.decision) or "-"),
        ("Reason", e(load.reason) or "-"),
        ("Commit", e(summarized.describe_last_resource())
         or "every participant prepares (the vote makes each ready, then logs the decision)"),
        ("Data interval", f"{e(when(load.data_interval_start))} – {e(when(load.data_interval_end))}"
         if load.data_interval_start else "-"),
        ("Source", _source(load)),
        ("Source lag at begin", _lag_at_begin(load)),
        ("Spark rows", counts_cell(expected)),
        ("Staged (votes)", counts_cell(staged)),
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
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in summary)
    vote_rows = "".join(
        f"<tr><td>{e(v.participant)}</td><td class=\"{'yes' if v.yes else 'no'}\">{'yes' if v.yes else 'no'}</td>"
        f'<td class="counts">{counts_cell(v.counts_or_total())}</td><td>{e(v.summary)}</td><td>{e(v.reason)}</td>'
        f"<td>{_json(v.committable)}</td></tr>"
        for v in votes.values()
    )
    votes_html = (f"<table><tr><th>Participant</th><th>Vote</th><th>Counts per target</th><th>Summary</th>"
                  f"<th>Reason</th><th>Commit data</th></tr>"
                  f"{vote_rows}</table>" if votes else '<p class="muted">No votes yet.</p>')
    history_rows = "".join(
        f"<tr><td>{e(t.from_state) or '-'}</td><td>{_state(t.to_state)}</td><td>{e(t.reason)}</td>"
        f'<td class="ts">{e(when(t.at))}</td></tr>'
        for t in history
    )
    history_html = (f"<table><tr><th>From</th><th>To</th><th>Reason</th><th>At</th></tr>{history_rows}</table>")
    prepare_error = f"<pre>{e(load.prepare_error)}</pre>" if load.prepare_error else '<p class="muted">None.</p>'
    audit_html = _audit(load.audit)
    body = (
        f'<p><a href="{e(list_url)}">← Transactions</a></p>'
        f"<h1>Load {e(load.load_id)}</h1><dl class=\"summary\">{dl}</dl>"
        f"<h2>Votes</h2>{votes_html}"
        f"<h2>Audit</h2>{audit_html}"
        f"<h2>History</h2>{history_html}"
        f"<h2>Metrics</h2>{_json(load.metrics)}"
        f"<h2>Prepare error</h2>{prepare_error}"
        f"<h2>Input</h2>{_json(load.input)}"
        + (f"<h2>Source range</h2>{_json(load.source_range)}" if load.source_range else "")
        + f"<h2>Participants</h2>{_json(load.participants)}"
    )
    return page(f"Load {load.load_id}", body)
