"""A load's source, in the protocol's steps (twophase/sources; ADR 0010): begin fixes the
range the load reads, after the source's last committed load, and checks it; prepare
checks it still reads as fixed once the job read it."""

from __future__ import annotations

from dataclasses import replace

from ..connections import Connections
from ..errors import Terminal
from ..log import Load
from ..sources import Range, SourceError
from ..spec import LoadSpec
from .states import TERMINAL, State


class NothingToRead(Terminal):
    """The source has nothing after the last committed load, and the pipeline skips empty
    loads: nothing is logged."""


class SourceBusy(Terminal):
    """Another load of the same source is still in flight: the next range starts where it
    ends, once it committed or aborted."""


def fix(spec: LoadSpec, others: list[Load], conns: Connections | None, empty: str = "load") -> LoadSpec:
    """The spec with its source's range fixed (coordinator.begin): `others`, the source's
    other loads, as the log's begin hands them under its lock on the source.
    - one of them in flight: SourceBusy;
    - the source's range does not name it, or does not continue the committed loads'
      ranges (a gap, an overlap): SourceError, naming it (the source is not trusted);
    - an empty range and `empty` "skip": NothingToRead."""
    busy = [o for o in others if o.state not in TERMINAL]
    if busy:
        raise SourceBusy("; ".join(f"load {o.load_id} of the same source ({spec.source.key}) is {o.state}"
                                   for o in busy) + ": wait for it to end (twophase_recovery resolves a crashed one)")
    committed = [Range.from_json(o.source_range) for o in others if o.state == State.COMMITTED]
    reader = spec.source.open(conns)
    fixed = reader.fix(committed)
    if fixed.source != spec.source.key:
        raise SourceError(f"{spec.source.key}: its range names another source, {fixed.source}")
    wrong = reader.follows(committed, fixed)
    if wrong:
        raise SourceError("the range fixed for the load does not continue the committed ones: " + "; ".join(wrong))
    if fixed.empty and empty == "skip":
        raise NothingToRead(f"{spec.source.key} has nothing new"
                            + (f" after the last committed load (up to {end_of(committed[-1])})" if committed else ""))
    return replace(spec, source_range=fixed.to_json())


def end_of(fixed: Range) -> str:
    """Where a range ended, in a line."""
    parts = fixed.position.get("partitions")
    if parts:
        return ", ".join(f"partition {p} offset {end}" for p, (_, end) in sorted(parts.items(), key=lambda x: int(x[0])))
    if "end" in fixed.position:
        return f"position {fixed.position['end']}"
    return f"{len(fixed.position.get('files', []))} file(s)"


def still_as_fixed(load: Load, conns: Connections) -> None:
    """After the job read its input: the source's range still reads as it was fixed at
    begin (no file grew or vanished, no record was deleted meanwhile), else SourceError
    naming what changed, and the prepare fails."""
    source = load.spec().source
    if source is None or load.source_range is None:
        return
    changed = source.open(conns).changed(Range.from_json(load.source_range))
    if changed:
        raise SourceError("the input changed while the load read it: " + "; ".join(changed[:20])
                          + (f"; ... and {len(changed) - 20} more" if len(changed) > 20 else ""))
