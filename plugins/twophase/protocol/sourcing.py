"""A load's source, in the protocol's steps (twophase/sources; ADR 0010): begin fixes the
range the load reads, after the source's last committed load, and checks it; prepare
checks it still reads as fixed once the job read it; commit shows the consumed position in
the source's own tools (a Kafka source's consumer group), in a participant's commit where
one can carry it atomically, else right after."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable

from ..connections import Connections
from ..errors import Terminal, root_cause
from ..log import Load, TransactionLog
from ..log.records import Skip
from ..sources import Range, SourceError
from ..spec import LoadSpec
from .states import TERMINAL, State

_log = logging.getLogger("twophase.sourcing")


class NothingToRead(Terminal):
    """The source has nothing after the last committed load, and the pipeline skips empty
    loads: nothing is logged."""


class SourceBusy(Terminal):
    """Another load of the same source is still in flight: the next range starts where it
    ends, once it committed or aborted."""


class NothingToSkip(Terminal):
    """An operator asked to skip a source's deleted records, and none are missing."""


def consumed(loads: list[Load], skips: list[Skip]) -> list[Range]:
    """What the source's committed loads read and operators skipped, in the order it was
    fixed (oldest first): the ranges the next one continues."""
    done = [(o.began_at, Range.from_json(o.source_range)) for o in loads if o.state == State.COMMITTED]
    done += [(s.at, Range.from_json(s.source_range)) for s in skips]
    return [fixed for _, fixed in sorted(done, key=lambda d: d[0])]


def _not_busy(key: str, loads: list[Load]) -> None:
    busy = [o for o in loads if o.state not in TERMINAL]
    if busy:
        raise SourceBusy("; ".join(f"load {o.load_id} of the same source ({key}) is {o.state}" for o in busy)
                         + ": wait for it to end (twophase_recovery resolves a crashed one)")


def fix(spec: LoadSpec, others: list[Load], conns: Connections | None, empty: str = "load",
        skips: list[Skip] = ()) -> LoadSpec:
    """The spec with its source's range fixed (coordinator.begin): `others`, the source's
    other loads, as the log's begin hands them under its lock on the source; `skips`, its
    skipped records (log.skips).
    - one of them in flight: SourceBusy;
    - the source's range does not name it, or does not continue the committed loads' and
      skips' ranges (a gap, an overlap): SourceError, naming it (the source is not trusted);
    - an empty range and `empty` "skip": NothingToRead."""
    _not_busy(spec.source.key, others)
    committed = consumed(others, list(skips))
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


def hand_over(load: Load, conns: Connections, parts) -> Callable[[], None] | None:
    """Before the commit: the load's consumed position to the first participant that can
    commit it with its own commit (Participant.carry_source: a Kafka source and a Kafka
    target on one cluster). Returns what shows the position once the load committed when
    none took it, else None. The log's committed ranges stay the truth: this is for the
    source's own tools (the lag kafka-consumer-groups.sh shows)."""
    source = load.spec().source
    if source is None or load.source_range is None:
        return None
    fixed, address = Range.from_json(load.source_range), source.server(conns)
    if any(p.carry_source(source, fixed, address) for p in parts):
        return None

    def mirror() -> None:
        try:
            source.open(conns).mirror(fixed)
        except Exception as exc:  # noqa: BLE001 - the load is committed; the next one mirrors its own end
            _log.warning("load %s committed, but its position in %s was not shown to the source's own tools "
                         "(the transaction log has it): %s", load.load_id, source.key, root_cause(exc))
    return mirror


def skip_deleted(log: TransactionLog, conns: Connections, key: str, by: str, why: str) -> Skip:
    """An operator passes over the records of source `key` that were deleted (a retention)
    before any load read them, so its loads can go on: the skip is logged with who and why,
    under the source's lock, and the next load starts after it. The source is the one its
    last load read (no load yet: SourceError, as its configured start decides where the
    first one reads). A load in flight: SourceBusy; nothing deleted: NothingToSkip."""
    loads = log.of_source(key)
    if not loads:
        raise SourceError(f"no load has read {key}: there is nothing to go on from (a first load starts at the "
                          "source's configured start)")
    source = loads[-1].spec().source

    def decide(loads: list[Load], skips: list[Skip]) -> dict:
        _not_busy(key, loads)
        committed = consumed(loads, skips)
        reader = source.open(conns)
        skipped = reader.deleted(committed)
        if skipped is None:
            raise NothingToSkip(f"{key}: no record after the last committed load is deleted; nothing to skip")
        wrong = reader.follows(committed, skipped)
        if wrong:
            raise SourceError("the range to skip does not continue the committed ones: " + "; ".join(wrong))
        return skipped.to_json()
    return log.skip(key, decide, by, why)
