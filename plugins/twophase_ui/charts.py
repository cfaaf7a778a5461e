"""Charts drawn on the server as inline SVG: no script, nothing to build.

Each chart is a <figure> whose <figcaption> says what it shows; every mark has a <title>
with its numbers (what a pointer or a screen reader gets), and each page prints the same
numbers in a table next to the chart. Marks carry their text beside them, so no chart is
read by colour alone. Coordinates are SVG user units of a fixed-width viewBox, scaled to
the page's width; the tests compare them with the log's figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from .render import e

WIDTH = 1100          # the viewBox's width
TIMELINE_LABELS = 200  # the timeline's left column: what each bar is
TIMELINE_PLOT = WIDTH - TIMELINE_LABELS - 90  # room on the right for the last bar's duration
ROW = 22
LANE_HEADING = 20      # a lane's name, above its bars
MIN_BAR = 2.0          # a span too short to see is still a mark

# A colour per series, in order (Tableau 10: distinct in greyscale too, by lightness).
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b", "#9d755d")


def seconds_text(value: float) -> str:
    """12.3 s, 4 min 05 s, 2 h 03 min: a duration as a person reads it."""
    if value < 60:
        return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
    if value < 3600:
        return f"{int(value // 60)} min {int(value % 60):02d} s"
    return f"{int(value // 3600)} h {int(value % 3600 // 60):02d} min"


def _step(total: float) -> float:
    """A round tick interval giving at most 8 ticks over `total` seconds."""
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400):
        if total / step <= 8:
            return step
    return 86400 * math.ceil(total / 86400 / 8)


def figure(svg: str, caption: str, above: bool = False) -> str:
    """The chart with its caption, below it (or `above`, as a small chart's title)."""
    if above:
        return f'<figure class="chart"><figcaption class="title">{e(caption)}</figcaption>{svg}</figure>'
    return f'<figure class="chart">{svg}<figcaption>{e(caption)}</figcaption></figure>'


@dataclass(frozen=True)
class Bar:
    """One bar of a timeline: a row of it, labelled on the left, its time written beside it."""

    lane: str
    label: str
    start: datetime
    end: datetime
    colour: str
    title: str
    text: str = ""
    dashed: bool = False  # estimated, or still going


def timeline(bars: list[Bar], t0: datetime, t1: datetime, label: str) -> str:
    """Bars on one time axis from t0 to t1, one row each, grouped by lane (a heading row
    names it). A bar at time t starts at TIMELINE_LABELS + (t - t0) / (t1 - t0) * TIMELINE_PLOT."""
    total = max((t1 - t0).total_seconds(), 1e-3)
    scale = TIMELINE_PLOT / total
    y, rows, lane = 20, [], None
    for bar in bars:
        if bar.lane != lane:
            lane = bar.lane
            rule = f'<line x1="0" x2="{WIDTH}" y1="{y + 2}" y2="{y + 2}" class="lane-rule"/>' if rows else ""
            rows.append(f'{rule}<text x="4" y="{y + 16}" class="lane">{e(lane)}</text>')
            y += LANE_HEADING
        x = TIMELINE_LABELS + (bar.start - t0).total_seconds() * scale
        width = max((bar.end - bar.start).total_seconds() * scale, MIN_BAR)
        dash = ' stroke-dasharray="4 2" class="estimated"' if bar.dashed else ""
        text_x = x + width + 4
        anchor = "start" if text_x < WIDTH - 80 else "end"
        text_x = text_x if anchor == "start" else x - 4
        rows.append(
            f'<text x="{TIMELINE_LABELS - 8}" y="{y + 12}" text-anchor="end" class="span">{e(bar.label)}</text>'
            f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW - 6}" rx="2" fill="{bar.colour}"'
            f' stroke="#1a202c" stroke-width="0.5"{dash} data-span="{e(bar.lane)}|{e(bar.label)}"'
            f' data-start="{bar.start.isoformat()}" data-end="{bar.end.isoformat()}"><title>{e(bar.title)}</title>'
            f'</rect><text x="{text_x:.2f}" y="{y + 12}" text-anchor="{anchor}" class="value">{e(bar.text)}</text>')
        y += ROW
    height = y + 6
    step = _step(total)
    ticks = "".join(
        f'<line x1="{TIMELINE_LABELS + s * scale:.2f}" x2="{TIMELINE_LABELS + s * scale:.2f}" y1="16" '
        f'y2="{height}" class="tick"/><text x="{TIMELINE_LABELS + s * scale:.2f}" y="12" text-anchor="middle" '
        f'class="axis">+{e(seconds_text(s) if s else "0")}</text>'
        for s in (k * step for k in range(int(total // step) + 1)))
    return (f'<svg viewBox="0 0 {WIDTH} {height}" width="100%" role="img" aria-label="{e(label)}" '
            f'class="timeline" xmlns="http://www.w3.org/2000/svg">{ticks}{"".join(rows)}</svg>')


def hbars(items: list[tuple[str, float, str]], label: str, colour: str = PALETTE[4], label_width: int = 330) -> str:
    """Horizontal bars, one per (name, value, text), longest = the plot's width; the text
    (the value in words) beside each bar."""
    top = max((v for _, v, _ in items), default=0) or 1
    plot = WIDTH - label_width - 280  # room for the longest text beside its bar
    rows = []
    for i, (name, value, text) in enumerate(items):
        y = 4 + i * ROW
        width = max(value / top * plot, MIN_BAR if value else 0)
        short = name if len(name) <= 48 else name[:47] + "…"
        rows.append(f'<text x="{label_width - 6}" y="{y + 12}" text-anchor="end" class="span">{e(short)}</text>'
                    f'<rect x="{label_width}" y="{y}" width="{width:.2f}" height="{ROW - 6}" fill="{colour}" '
                    f'data-value="{value}"><title>{e(name)}: {e(text)}</title></rect>'
                    f'<text x="{label_width + width + 4:.2f}" y="{y + 12}" class="value">{e(text)}</text>')
    height = 8 + len(items) * ROW
    return (f'<svg viewBox="0 0 {WIDTH} {height}" width="100%" role="img" aria-label="{e(label)}" class="hbars" '
            f'xmlns="http://www.w3.org/2000/svg">{"".join(rows)}</svg>')


@dataclass(frozen=True)
class Column:
    """One column of a column chart: its segments stacked from the axis up, each
    (series index, value, text), a marker under it and a link."""

    key: str
    title: str
    segments: list[tuple[int, float, str]] = field(default_factory=list)
    marker: str = ""
    marker_class: str = ""
    href: str = ""


def columns(cols: list[Column], series: list[str], label: str, unit: str, height: int = 120,
            fmt=lambda v: f"{v:g}", colours: tuple[str, ...] = PALETTE) -> str:
    """Stacked columns, oldest left, sharing one vertical scale (0 to the tallest column);
    the top value is written on the axis, each column's marker (a state's glyph) under it,
    a legend of the series above."""
    left, right, top = 70, 10, 22
    plot_w = WIDTH - left - right
    peak = max((sum(v for _, v, _ in c.segments) for c in cols), default=0) or 1
    slot = plot_w / max(len(cols), 1)
    width = max(min(slot * 0.7, 40), 2)
    marks = []
    for i, col in enumerate(cols):
        x = left + i * slot + (slot - width) / 2
        base, parts = top + height, []
        for index, value, text in col.segments:
            h = value / peak * height
            base -= h
            parts.append(f'<rect x="{x:.2f}" y="{base:.2f}" width="{width:.2f}" height="{h:.2f}" '
                         f'fill="{colours[index % len(colours)]}" data-series="{e(series[index])}" '
                         f'data-value="{value}"><title>{e(col.title)}: {e(series[index])} {e(text)}</title></rect>')
        glyph = (f'<text x="{x + width / 2:.2f}" y="{top + height + 16}" text-anchor="middle" '
                 f'class="marker {e(col.marker_class)}">{e(col.marker)}<title>{e(col.title)}</title></text>')
        group = "".join(parts) + glyph
        marks.append(f'<a href="{e(col.href)}" data-load="{e(col.key)}">{group}</a>' if col.href else
                     f'<g data-load="{e(col.key)}">{group}</g>')
    legend = "".join(
        f'<rect x="{left + i * 190}" y="2" width="10" height="10" fill="{colours[i % len(colours)]}"/>'
        f'<text x="{left + i * 190 + 14}" y="11" class="legend">{e(s if len(s) <= 26 else s[:25] + "…")}</text>'
        for i, s in enumerate(series)) if len(series) > 1 else ""
    axis = (f'<line x1="{left}" x2="{WIDTH - right}" y1="{top + height}" y2="{top + height}" class="tick"/>'
            f'<line x1="{left}" x2="{WIDTH - right}" y1="{top}" y2="{top}" class="tick"/>'
            f'<text x="{left - 6}" y="{top + 4}" text-anchor="end" class="axis">{e(fmt(peak))}</text>'
            f'<text x="{left - 6}" y="{top + height}" text-anchor="end" class="axis">0</text>'
            f'<text x="{left - 6}" y="{top + height / 2 + 4}" text-anchor="end" class="axis">{e(unit)}</text>')
    total_h = top + height + 24
    return (f'<svg viewBox="0 0 {WIDTH} {total_h}" width="100%" role="img" aria-label="{e(label)}" class="columns" '
            f'xmlns="http://www.w3.org/2000/svg">{legend}{axis}{"".join(marks)}</svg>')
