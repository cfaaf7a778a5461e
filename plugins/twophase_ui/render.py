"""The Transactions page's HTML: server-rendered, every value from the log escaped."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from html import escape
from typing import Callable, Iterable

from twophase.ops.report import LoadSummary
from twophase.protocol.states import State

from .links import dag_run_url
from .queries import seconds

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
pre { background: #f7fafc; border: 1px solid #e2e8f0; padding: 8px; overflow-x: auto; white-space: pre-wrap;
      margin: 0; }
.state { font-weight: 600; white-space: nowrap; }
.COMMITTED { color: #2f855a; } .ABORTED { color: #718096; } .VIOLATED { color: #c53030; }
.PREPARING, .PREPARED, .COMMITTING, .ABORTING { color: #b7791f; }
.yes { color: #2f855a; font-weight: 600; } .no { color: #c53030; font-weight: 600; }
.verdict-pass { color: #2f855a; font-weight: 600; } .verdict-warn { color: #b7791f; font-weight: 600; }
.verdict-error { color: #c53030; font-weight: 600; }
form.filters { margin: 0 0 12px; display: flex; gap: 12px; align-items: end; flex-wrap: wrap; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: #4a5568; }
dl.summary { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 0; }
dl.summary dt { color: #4a5568; } dl.summary dd { margin: 0; }
.muted { color: #718096; }
nav.crumbs { margin: 0 0 8px; color: #4a5568; } nav.crumbs a { margin-right: 12px; }
.lede { display: flex; gap: 24px; flex-wrap: wrap; align-items: baseline; margin: 0 0 12px; }
.lede .big { font-size: 18px; font-weight: 600; }
figure { margin: 0 0 8px; } figcaption { font-size: 12px; color: #4a5568; margin-top: 2px; }
figcaption.title { font-size: 13px; font-weight: 600; color: #1a202c; margin: 10px 0 0; }
svg text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; fill: #1a202c; }
svg text.lane { font-weight: 600; } svg text.axis, svg text.legend { fill: #4a5568; font-size: 11px; }
svg text.value { fill: #2d3748; font-variant-numeric: tabular-nums; }
svg line.tick { stroke: #e2e8f0; } svg line.lane-rule { stroke: #cbd5e0; }
svg text.marker { font-size: 13px; font-weight: 700; }
svg text.COMMITTED { fill: #2f855a; } svg text.ABORTED { fill: #718096; } svg text.VIOLATED { fill: #c53030; }
svg text.inflight { fill: #b7791f; }
details { margin: 6px 0; } summary { cursor: pointer; color: #2b6cb0; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr)); gap: 12px; }
.card { border: 1px solid #e2e8f0; border-radius: 6px; padding: 10px 12px; background: #fff; }
.card h3 { font-size: 14px; margin: 0 0 6px; overflow-wrap: anywhere; }
.card .kind { font-size: 11px; text-transform: uppercase; letter-spacing: .05em; color: #4a5568; }
.card dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; margin: 0; }
.card dt { color: #4a5568; } .card dd { margin: 0; overflow-wrap: anywhere; font-variant-numeric: tabular-nums; }
.card code, td code { font-size: 12px; overflow-wrap: anywhere; }
.two { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 24px; align-items: start; }
table.wrap td { overflow-wrap: anywhere; }
pre.command { white-space: pre-wrap; background: #1a202c; color: #f7fafc; border: 0; }
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


def run_link(dag_id: str, run_id: str) -> str:
    return f'<a data-airflow-ui href="{e(dag_run_url(dag_id, run_id))}">{e(run_id)}</a>'


# A state's glyph: with its name beside it (or in a chart's title and table), a state is
# read without its colour.
MARKERS = {State.COMMITTED.value: "✓", State.ABORTED.value: "✗", State.VIOLATED.value: "‼"}
IN_FLIGHT = "…"


def marker(state: str) -> str:
    """The state's glyph: ✓ committed, ✗ aborted, ‼ violated, … not finished."""
    return MARKERS.get(state, IN_FLIGHT)


def marked_state(state: str) -> str:
    """A state as a badge with its glyph first."""
    return f'<span class="state {e(state)}"><span aria-hidden="true">{marker(state)}</span> {e(state)}</span>'


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


def list_page(rows: list[LoadSummary], *, detail_url: Callable[[str], str], pipeline_url: Callable[[str], str],
              pipelines: list[str], pipeline: str | None, state: str | None, limit: int) -> str:
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
        f'<span class="run">run {run_link(r.dag_id or r.pipeline, r.run_id)}</span></td>'
        + ("" if pipeline else f'<td><a href="{e(pipeline_url(r.pipeline))}">{e(r.pipeline)}</a></td>')
        + f"<td>{marked_state(r.state)}</td>"
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
    title = "<h1>Transactions</h1>" if pipeline is None else (
        f'<h1>Transactions <span class="muted">of {e(pipeline)}</span></h1><nav class="crumbs">'
        f'<a href="{e(pipeline_url(pipeline))}">The pipeline\'s page: health, stuck loads, lag, charts</a></nav>')
    return page("Transactions", f"{title}{filters}{shown if rows else ''}{table}")


def _phases(r: LoadSummary) -> str:
    """A row's title: each phase's time, and the decision."""
    return (f"prepare {duration(r.prepare_s)}, vote {duration(r.vote_s)}, phase 2 {duration(r.phase2_s)}"
            + (f"; decision {r.decision}" if r.decision else "; not decided yet"))
