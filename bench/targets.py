"""The issue's targets, checked on the figures of one run, as ratios measured side by side.

Every ratio uses medians of the same invocation. A target holds for a shape when it holds
at every size measured (the memory target compares the largest size with the smallest).
Staging streams each partition to both targets in one Spark pass, so "Postgres staging"
and "Kafka staging" are the same pass, compared with each limit in turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import memory
from . import results as R
from .results import Run

PG_COMMIT_LIMIT_S = 0.050


@dataclass
class Check:
    target: str
    shape: str
    cells: dict[int, str]        # rows -> the measured figure
    ok: bool | None              # None: not measurable in this run (one size only)
    note: str = ""

    @property
    def verdict(self) -> str:
        return "n/a" if self.ok is None else ("PASS" if self.ok else "MISS")


def _ratio_check(target, shape, runs, value, passes, fmt) -> Check:
    cells, ok = {}, True
    for run in runs:
        try:
            v = value(run)
        except ValueError:  # a contender this run skipped (--no-limits)
            cells[run.rows], ok = "–", None
            continue
        cells[run.rows] = fmt(v) + ("" if passes(v) else " ✗")
        ok = ok and passes(v) if ok is not None else None
    return Check(target, shape, cells, ok)


def check(shape: str, runs: list[Run]) -> list[Check]:
    runs = sorted(runs, key=lambda r: r.rows)
    load, staging, attach = R.atomic("load"), R.atomic("prepare.staging"), R.attach("load")
    checks = [
        _ratio_check("atomic load (prepare+vote+commit) time ÷ peer writing both, default options: ≤ 1.00",
                     shape, runs, lambda r: r.median(load) / r.median(R.BOTH_DEFAULT), lambda v: v <= 1.0,
                     lambda v: f"{v:.2f}x"),
        _ratio_check("atomic load time ÷ peer writing both, tuned JDBC: ≤ 1.30",
                     shape, runs, lambda r: r.median(load) / r.median(R.BOTH_TUNED), lambda v: v <= 1.3,
                     lambda v: f"{v:.2f}x"),
        _ratio_check("atomic load, publish attach (table partitioned by day), ÷ peer writing both, default "
                     "options: ≤ 1.00", shape, runs, lambda r: r.median(attach) / r.median(R.BOTH_DEFAULT),
                     lambda v: v <= 1.0, lambda v: f"{v:.2f}x"),
        _ratio_check("atomic load, publish attach, ÷ peer writing both, tuned JDBC: ≤ 1.30",
                     shape, runs, lambda r: r.median(attach) / r.median(R.BOTH_TUNED), lambda v: v <= 1.3,
                     lambda v: f"{v:.2f}x"),
        _with_note(_ratio_check("Postgres staging rows/s ÷ COPY limit rows/s: ≥ 70%",
                                shape, runs, lambda r: r.rate(staging) / r.rate(R.COPY), lambda v: v >= 0.70,
                                lambda v: f"{v:.0%}"),
                   runs, "the Postgres side alone (staging breakdown) ÷ COPY",
                   lambda r: r.rate(R.breakdown("postgres_only")) / r.rate(R.COPY)),
        _ratio_check("Kafka staging records/s ÷ producer tool records/s: ≥ 50%",
                     shape, runs, lambda r: r.rate(staging) / r.rate(R.PRODUCER_TOOL), lambda v: v >= 0.50,
                     lambda v: f"{v:.0%}"),
        # Issue 28: the copy at least the producer tool's records/s (issue 5 asked for half). The
        # tool's records/s leaves out its start, so the copy's does too (atomic.py: kafka_copy);
        # the whole commit step, start and checks included, is in the note.
        _with_note(_ratio_check("Kafka commit copy records/s (start-up excluded, as the tool's) ÷ producer tool "
                                "records/s: ≥ 100%", shape, runs,
                                lambda r: r.rate(R.atomic("commit.kafka_copy")) / r.rate(R.PRODUCER_TOOL),
                                lambda v: v >= 1.00, lambda v: f"{v:.0%}"),
                   runs, "the whole commit step (the JVM's start and the checks included) ÷ the tool",
                   lambda r: r.rate(R.atomic("commit.kafka")) / r.rate(R.PRODUCER_TOOL)),
        _ratio_check("Postgres commit (COMMIT PREPARED), slowest repetition: < 50 ms",
                     shape, runs, lambda r: r.max(R.atomic("commit.postgres")), lambda v: v < PG_COMMIT_LIMIT_S,
                     lambda v: f"{v * 1000:.1f} ms"),
    ]
    checks.append(_linear(shape, runs))
    checks.extend(_memory(shape, runs))
    return checks


def _with_note(check: Check, runs: list[Run], what: str, value) -> Check:
    """Add, per size, a related figure (when this run measured it) to the check's note."""
    figures = []
    for run in runs:
        try:
            figures.append(f"{value(run):.0%} at {run.rows:,}")
        except ValueError:
            return check
    check.note = f"{what}: " + ", ".join(figures)
    return check


def _linear(shape: str, runs: list[Run]) -> Check:
    """Kafka commit records/s at the largest size at least 80% of the best smaller size's."""
    key = R.atomic("commit.kafka")
    cells = {r.rows: f"{r.rate(key):,.0f}/s" for r in runs}
    if len(runs) < 2:
        return Check("Kafka commit scales linearly (records/s at the largest size ≥ 80% of smaller sizes')",
                     shape, cells, None)
    best_smaller = max(r.rate(key) for r in runs[:-1])
    ok = runs[-1].rate(key) >= 0.8 * best_smaller
    return Check("Kafka commit scales linearly (records/s at the largest size ≥ 80% of smaller sizes')",
                 shape, cells, ok, f"largest ÷ best smaller: {runs[-1].rate(key) / best_smaller:.2f}")


MEMORY_KINDS = (("jvm", "Spark driver JVM"), ("workers", "Python workers"),
                ("py_driver", "coordinator's Python process"), ("copy_jvm", "Kafka commit copy's JVM"),
                ("kafka", "Kafka broker"), ("postgres", "Postgres servers (PSS)"))
# Measured with bench/run --live-heap only (bench/memory.py: LiveHeap): the 90th percentile
# of the window's readings, compared at each size; their peak beside it.
LIVE_HEAP = ("jvm_live_p90", f"live heap of the Spark driver JVM (90th percentile of its readings after a full GC "
                             f"every {memory.LIVE_EVERY_S:g} s; their peak in brackets)")


def _memory(shape: str, runs: list[Run]) -> list[Check]:
    checks = []
    live = [LIVE_HEAP] if any(r.peak_rss("atomic", LIVE_HEAP[0]) for r in runs) else []
    for kind, label in [*MEMORY_KINDS, *live]:
        target = (f"{label if kind == LIVE_HEAP[0] else 'peak memory of the ' + label} during the atomic load "
                  "÷ at the smallest size: ≤ 1.5")
        base = runs[0].peak_rss("atomic", kind)
        cells = {r.rows: _memory_cell(r, "atomic", kind, base) for r in runs}
        ok = (None if len(runs) < 2 or not base or not runs[-1].peak_rss("atomic", kind)
              else runs[-1].peak_rss("atomic", kind) <= 1.5 * base)
        note = ""
        if kind in ("jvm", LIVE_HEAP[0]) and runs[0].peak_rss(R.SCAN, kind):
            # In local mode the executors live in the driver JVM, whose heap grows with what
            # Spark itself reads: the same figure for a plain scan of the input tells them apart.
            scan = [runs[0].peak_rss(R.SCAN, kind), runs[-1].peak_rss(R.SCAN, kind)]
            note = (f"Spark's own noop scan of the same input: {scan[0] / 2**20:,.0f} MB → "
                    f"{scan[1] / 2**20:,.0f} MB ({scan[1] / scan[0]:.2f}x)")
        checks.append(Check(target, shape, cells, ok, note))
    return checks


def _memory_cell(run: Run, group: str, kind: str, base: int) -> str:
    """`N MB (ratio to base)`, and for the live heap's percentile, the readings' peak too."""
    value = run.peak_rss(group, kind)
    if not base or not value:
        return "–"
    peak = f"; peak {run.peak_rss(group, 'jvm_live') / 2**20:,.0f} MB" if kind == LIVE_HEAP[0] else ""
    return f"{value / 2**20:,.0f} MB ({value / base:.2f}x{peak})"
