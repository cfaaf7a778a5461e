"""A pipeline's page: is it healthy, what is stuck and how to resolve it, how far behind its source.

From the top: the newest loads' states counted; the loads not finished, each with what it
waits for, and the one command that resolves those recovery can; the lag behind each
source; the newest loads as charts (each phase's time, rows per target, rejected share;
each load's state as a glyph under its column) and the same figures as a table.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Callable

from twophase.log import Load
from twophase.ops.recovery import outlook
from twophase.protocol.states import State

from . import charts
from .charts import seconds_text
from .links import dag_url
from .queries import LoadSummary, PipelineLoads, seconds
from .render import IN_FLIGHT, breakable, count, duration, e, marked_state, marker, page, when

PHASES = ("prepare", "vote", "phase 2")
MAX_TARGET_CHARTS = 4  # a chart each; more targets are in the table only


def recover_command(pipeline: str) -> str:
    """The one command that resolves the pipeline's loads recovery can, where Airflow runs."""
    return f"python -m twophase_airflow recover --pipeline {pipeline}"


def unfinished_section(pipeline: str, unfinished: list[Load], now: datetime, load_url: Callable[[str], str]) -> str:
    """The loads not finished, each with what it waits for and whether recovery acts on it
    now (recovery.outlook: the rules recovery acts on)."""
    if not unfinished:
        return '<p class="muted">None: every load of the pipeline has finished.</p>'
    rows, resolvable = [], 0
    for load in unfinished:
        seen = outlook(load, now)
        resolvable += seen.acts
        rows.append(f'<tr><td class="id"><a href="{e(load_url(load.load_id))}">{e(load.load_id)}</a></td>'
                    f"<td>{marked_state(load.state.value)}</td><td class=\"ts\">{e(when(load.began_at))}</td>"
                    f"<td>{e(seen.says)}</td></tr>")
    command = (f'<p>{resolvable} of them recovery resolves now (the twophase_recovery DAG does every 10 minutes); '
               f'where Airflow runs:</p><pre class="command">{e(recover_command(pipeline))}</pre>'
               if resolvable else
               f'<p class="muted">Recovery leaves them alone for now; should one stay, '
               f'<code>{e(recover_command(pipeline))}</code> resolves it once it is due.</p>')
    return (f"<table><tr><th>Load</th><th>State</th><th>Began</th><th>Waits for</th></tr>{''.join(rows)}</table>"
            + command)


def lag_section(lags: dict[str, int | str]) -> str:
    if not lags:
        return '<p class="muted">The pipeline\'s newest loads read no source.</p>'
    rows = "".join(
        f"<tr><td><code>{e(key)}</code></td><td class=\"num\">{count(behind) if isinstance(behind, int) else ''}</td>"
        f"<td>{'records, offsets or files no committed load read' if isinstance(behind, int) else e(behind)}</td></tr>"
        for key, behind in lags.items())
    return f"<table><tr><th>Source</th><th>Behind</th><th></th></tr>{rows}</table>"


def _targets(recent: list[LoadSummary]) -> list[str]:
    targets: dict[str, None] = {}
    for r in recent:
        targets.update(dict.fromkeys(r.counts))
    return list(targets)


def _share(data: PipelineLoads, load_id: str) -> float | None:
    inputs, rejected = data.input_lines.get(load_id), data.rejected_lines.get(load_id)
    return rejected / inputs if inputs and rejected is not None else None


def _column(r: LoadSummary, segments, load_url) -> charts.Column:
    state_class = r.state if r.state in (s.value for s in (State.COMMITTED, State.ABORTED, State.VIOLATED)) \
        else "inflight"
    return charts.Column(r.load_id, f"{when(r.began_at)} {r.load_id} {r.state}", segments, marker(r.state),
                         state_class, load_url(r.load_id))


def charts_section(data: PipelineLoads, load_url: Callable[[str], str]) -> str:
    """The newest loads, oldest left: each phase's time, rows per target, rejected share;
    then the table of the same figures."""
    loads = list(reversed(data.recent))
    span = (f"{len(loads)} newest loads, oldest left ({when(loads[0].began_at)} to {when(loads[-1].began_at)}); "
            f"under each column its state: ✓ committed, ✗ aborted, ‼ violated, {IN_FLIGHT} not finished")
    phases = [_column(r, [(i, v, duration(v)) for i, v in enumerate((r.prepare_s, r.vote_s, r.phase2_s))
                          if v is not None], load_url) for r in loads]
    out = [f'<p class="muted">{e(span)}. A column links to its load.</p>',
           charts.figure(charts.columns(phases, list(PHASES), f"Each phase's time of the {span}", "seconds",
                                        fmt=seconds_text), "Time of each phase: prepare, vote, phase 2", above=True)]
    targets = _targets(data.recent)
    for target in targets[:MAX_TARGET_CHARTS]:
        cols = [_column(r, [(0, r.counts[target], count(r.counts[target]))] if target in r.counts else [], load_url)
                for r in loads]
        out.append(charts.figure(charts.columns(cols, [target], f"Rows staged for {target}, {span}", "rows",
                                                height=60, fmt=lambda v: f"{v:,.0f}"),
                                 f"Rows or records staged for {target}", above=True))
    shares = [_column(r, [] if _share(data, r.load_id) is None else
                      [(0, _share(data, r.load_id), f"{_share(data, r.load_id):.1%}")], load_url) for r in loads]
    if any(c.segments for c in shares):
        out.append(charts.figure(charts.columns(shares, ["rejected share"], f"Rejected share of input lines, {span}",
                                                "rejected", height=60, fmt=lambda v: f"{v:.1%}",
                                                colours=(charts.PALETTE[4],)),
                                 "Share of input lines rejected", above=True))
    return "".join(out) + _table(data, targets, load_url)


def _table(data: PipelineLoads, targets: list[str], load_url) -> str:
    head = ("<tr><th>Began</th><th>Load</th><th>State</th><th>Prepare</th><th>Vote</th><th>Phase 2</th>"
            + "".join(f'<th class="target">{breakable(t)}</th>' for t in targets) + "<th>Rejected</th></tr>")
    rows = "".join(
        f'<tr><td class="ts">{e(when(r.began_at))}</td><td class="id"><a href="{e(load_url(r.load_id))}">'
        f"{e(r.load_id)}</a></td><td>{marked_state(r.state)}</td><td class=\"num\">{duration(r.prepare_s)}</td>"
        f'<td class="num">{duration(r.vote_s)}</td><td class="num">{duration(r.phase2_s)}</td>'
        + "".join(f'<td class="num">{count(r.counts.get(t))}</td>' for t in targets)
        + f'<td class="num">{"-" if _share(data, r.load_id) is None else f"{_share(data, r.load_id):.1%}"}</td></tr>'
        for r in data.recent)
    return f"<details><summary>The same figures as a table</summary><table>{head}{rows}</table></details>"


def pipeline_page(pipeline: str, dag_id: str, data: PipelineLoads, lags: dict[str, int | str], *, list_url: str,
                  load_url: Callable[[str], str]) -> str:
    states = Counter(r.state for r in data.recent)
    took = [seconds(r.began_at, r.finished_at) for r in data.recent if r.state == State.COMMITTED.value]
    committed = [r for r in data.recent if r.state == State.COMMITTED.value]
    lede = ('<div class="lede">'
            + "".join(f"<span>{marked_state(s)} <strong>{n}</strong></span>" for s, n in states.most_common())
            + (f"<span>last committed load began {e(when(committed[0].began_at))}, took "
               f"<strong>{duration(took[0])}</strong></span>" if committed else "<span>no committed load</span>")
            + f"<span>of the newest {len(data.recent)}</span></div>")
    body = (
        f'<nav class="crumbs"><a href="{e(list_url)}">← Transactions of {e(pipeline)}</a>'
        f'<a data-airflow-ui href="{e(dag_url(dag_id))}">The DAG in Airflow</a></nav>'
        f"<h1>Pipeline {e(pipeline)}</h1>" + (lede if data.recent else "")
        + f"<h2>Not finished</h2>{unfinished_section(pipeline, data.unfinished, data.now, load_url)}"
        + f"<h2>Lag behind the source</h2>{lag_section(lags)}"
        + "<h2>Newest loads</h2>"
        + (charts_section(data, load_url) if data.recent else '<p class="muted">No loads of this pipeline.</p>')
    )
    return page(f"Pipeline {pipeline}", body)
