"""A load's source (twophase/sources) through the real coordinator: begin fixes the range
and logs it, one load of a source at a time, the next load continues the last committed
one (an aborted load's range is read again), a source whose range does not continue the
committed ones is refused, and a range that changed while it was read fails the prepare.
In-memory log, participants and source (test_coordinator.py)."""

from __future__ import annotations

import random
from pathlib import Path
from dataclasses import replace

import pytest

from test_coordinator import Conns, make_spec, visible
from twophase.log import MemoryLog
from twophase.participants.memory import LocalFrame, LocalStage, MemoryStore
from twophase.protocol import coordinator, sourcing
from twophase.protocol.states import State
from twophase.sources import Range, SourceError
from twophase.sources.memory import FEED, MemoryReader, MemorySource
from twophase.spec import LoadSpec


def sourced(name: str, run_id: str, cap: int = 0, source=None) -> LoadSpec:
    return replace(make_spec(run_id), source=source or MemorySource(name, cap))


def job(spec_load) -> LocalFrame:
    """What the pipeline's job does: read exactly the load's range, one row per record."""
    fixed = Range.from_json(spec_load.source_range)
    records = spec_load.spec().source.open().read(fixed)
    return LocalFrame.of_rows([{"customer_id": f"c{r}", "amount": r} for r in records] or [], partitions=2)


def run(log, conns, spec, abort: bool = False):
    load = coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, job(load), stage=LocalStage())
    if abort:
        coordinator.vote(log, conns, spec.load_id, rules=[lambda *_: "the test rolls it back"])
    else:
        coordinator.vote(log, conns, spec.load_id)
    decided = log.get(spec.load_id)
    if decided.state == State.COMMITTING:
        coordinator.commit(log, conns, spec.load_id)
    else:
        coordinator.rollback(log, conns, spec.load_id)
    return log.get(spec.load_id)


def test_begin_fixes_the_range_and_logs_it_with_the_source(tmp_path):
    name = tmp_path.name
    FEED.append(name, *range(5))
    log = MemoryLog()
    load = coordinator.begin(log, sourced(name, "r1"))
    assert load.source == f"memory:{name}"
    assert Range.from_json(load.source_range) == Range(f"memory:{name}", "memory", {"start": 0, "end": 5}, 5, behind=0)
    assert load.spec().source == MemorySource(name)


def test_one_load_of_a_source_at_a_time(tmp_path):
    name = tmp_path.name
    FEED.append(name, *range(3))
    log = MemoryLog()
    first = coordinator.begin(log, sourced(name, "r1"))
    with pytest.raises(coordinator.SourceBusy, match=f"load {first.load_id} of the same source .* is PREPARING"):
        coordinator.begin(log, sourced(name, "r2"))
    assert [x.load_id for x in log.recent()] == [first.load_id]  # nothing logged for the second


def test_loads_read_every_record_exactly_once_across_aborts_and_a_cap(tmp_path):
    """Twenty loads while the source grows, a third of them rolled back, at most 7 records
    each: the committed loads' ranges are contiguous and hold every record once, and the
    source shows the last committed end after each."""
    name, rng = tmp_path.name, random.Random(7)
    log, store = MemoryLog(), MemoryStore()
    conns = Conns(store)
    total, committed = 0, []
    for i in range(20):
        grown = rng.randint(0, 9)
        FEED.append(name, *range(total, total + grown))
        total += grown
        load = run(log, conns, sourced(name, f"r{i}", cap=7), abort=rng.random() < 0.33)
        fixed = Range.from_json(load.source_range)
        assert load.state in (State.COMMITTED, State.ABORTED)
        assert visible(conns, load.load_id)["shop.orders"] == (fixed.records if load.state == State.COMMITTED else 0)
        if load.state == State.COMMITTED:
            committed.append(fixed)
        # The source's own tools show where the committed loads got to; an aborted one moves nothing.
        assert FEED.shown.get(name) == (committed[-1].position["end"] if committed else None)
    ends = [(r.position["start"], r.position["end"]) for r in committed]
    assert all(a[1] == b[0] for a, b in zip(ends, ends[1:])), ends  # no gap, no overlap
    assert sum(r.records for r in committed) == ends[-1][1] and ends[0][0] == 0
    assert MemorySource(name).open().lag(committed) == total - ends[-1][1]


class Skipping(MemorySource):
    """A source whose fix skips the first record after the last committed range."""

    def open(self, conns=None, feed=None):
        reader = MemoryReader(self, feed or FEED)
        fix = reader.fix
        reader.fix = lambda committed: replace(fix(committed), position={
            "start": fix(committed).position["start"] + 1, "end": fix(committed).position["end"]})
        return reader


def test_a_replace_load_of_an_interval_and_a_source_logs_what_it_replaces(tmp_path):
    """A load with a data interval and a source (an IntervalFolder's): its range is fixed
    on the spec the interval's plan made, so a replace load still replaces the committed
    load of its interval."""
    name, day = tmp_path.name, ("2026-11-20T00:00:00+00:00", "2026-11-21T00:00:00+00:00")
    FEED.append(name, *range(3))
    log, conns = MemoryLog(), Conns(MemoryStore())
    first = run(log, conns, replace(make_spec("r1", interval=day), source=MemorySource(name)))
    assert first.state == State.COMMITTED
    second = coordinator.begin(log, replace(make_spec("r2", "replace", interval=day), source=MemorySource(name)))
    assert second.spec().replaces == (first.load_id,) and second.source_range is not None
    assert second.spec().targets == make_spec("r2", "replace", interval=day).replacing([first.load_id]).targets


def test_a_source_whose_range_does_not_continue_the_committed_ones_is_refused(tmp_path):
    name = tmp_path.name
    FEED.append(name, *range(4))
    log = MemoryLog()
    lying = Skipping(name)
    with pytest.raises(SourceError, match=r"does not continue the committed ones: memory:\S+: positions 0..0 would "
                                          "never be read"):
        coordinator.begin(log, sourced(name, "r1", source=lying))
    assert log.recent() == []


def test_a_range_that_changed_while_it_was_read_fails_the_prepare_and_the_vote_aborts(tmp_path):
    name = tmp_path.name
    FEED.append(name, *range(4))
    log, conns = MemoryLog(), Conns(MemoryStore())
    spec = sourced(name, "r1")
    load = coordinator.begin(log, spec)
    frame = job(load)
    FEED.trim(name, 2)  # a retention deleted two records the job was to read
    with pytest.raises(SourceError, match=r"the input changed while the load read it: .*records 0..1 were deleted"):
        coordinator.prepare(log, conns, spec.load_id, frame, stage=LocalStage())
    decided = coordinator.vote(log, conns, spec.load_id)
    assert decided.state == State.ABORTING and "records 0..1 were deleted" in decided.reason


def test_a_landing_folder_reports_what_it_does_not_read_and_names_a_file_that_vanished(tmp_path):
    from twophase.sources.files import FilesSource

    (tmp_path / "a.json").write_text("{}\n")
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.json").write_text("{}\n{}\n")
    source = FilesSource(str(tmp_path), "new")
    fixed = source.open().fix([])
    assert [Path(f[0]).name for f in fixed.position["files"]] == ["a.json"]
    assert fixed.position["skipped"] == [
        ["_SUCCESS", 0, "hidden name (starts with '_' or '.': a marker or a file being written)"],
        ["sub/b.json", 6, "in the subfolder sub/ (only the folder's own files are read)"]]
    assert source.describe(fixed) == f"files:{tmp_path}: 1 file(s), 3 bytes; 2 not read (hidden or in a subfolder)"
    (tmp_path / "a.json").unlink()
    assert source.open().changed(fixed) == [f"{tmp_path}/a.json vanished after the load listed it"]


def test_a_files_source_refuses_a_folder_that_is_not_there_and_a_bad_mode(tmp_path):
    from twophase.sources.files import FilesSource

    with pytest.raises(SourceError, match="the folder does not exist"):
        FilesSource(str(tmp_path / "nope")).open().fix([])
    with pytest.raises(SourceError, match="mode must be one of interval, new, got 'all'"):
        FilesSource(str(tmp_path), "all")


def test_nothing_new_begins_no_load_when_empty_loads_are_skipped_and_an_empty_one_otherwise(tmp_path):
    name = tmp_path.name
    FEED.append(name, *range(3))
    log, conns = MemoryLog(), Conns(MemoryStore())
    with pytest.raises(coordinator.NothingToRead, match=f"memory:{name}-none has nothing new$"):
        coordinator.begin(log, sourced(name + "-none", "r0"), empty="skip")
    assert run(log, conns, sourced(name, "r1")).state == State.COMMITTED
    with pytest.raises(coordinator.NothingToRead, match=f"memory:{name} has nothing new after the last committed "
                                                        r"load \(up to position 3\)"):
        coordinator.begin(log, sourced(name, "r2"), empty="skip")
    assert [x.run_id for x in log.recent()] == ["r1"]
    empty = coordinator.begin(log, sourced(name, "r2"))  # empty="load"
    assert Range.from_json(empty.source_range).empty


class Elsewhere(MemorySource):
    """A source whose range names another source."""

    def open(self, conns=None, feed=None):
        reader = MemoryReader(self, feed or FEED)
        fix = reader.fix
        reader.fix = lambda committed: replace(fix(committed), source="memory:someone-else")
        return reader


def test_a_range_that_names_another_source_is_refused(tmp_path):
    FEED.append(tmp_path.name, 1)
    log = MemoryLog()
    with pytest.raises(SourceError, match=f"memory:{tmp_path.name}: its range names another source, "
                                          "memory:someone-else"):
        coordinator.begin(log, sourced(tmp_path.name, "r1", source=Elsewhere(tmp_path.name)))
    assert log.recent() == []


def test_a_position_the_source_cannot_show_leaves_the_load_committed_and_says_so(tmp_path, caplog, monkeypatch):
    def mirror(reader, fixed):  # the source's own tools do not answer (a Kafka group coordinator away)
        raise ConnectionError("the group coordinator does not answer")
    monkeypatch.setattr(MemoryReader, "mirror", mirror)
    name = tmp_path.name
    FEED.append(name, *range(3))
    log, conns = MemoryLog(), Conns(MemoryStore())
    load = run(log, conns, sourced(name, "r1"))
    assert load.state == State.COMMITTED and visible(conns, load.load_id)["shop.orders"] == 3
    assert f"load {load.load_id} committed, but its position in memory:{name} was not shown" in caplog.text
    assert "the group coordinator does not answer" in caplog.text
    assert coordinator.commit(log, conns, load.load_id) == []  # committed already: nothing again


def test_records_deleted_before_any_load_read_them_stop_the_source_until_an_operator_skips_them(tmp_path):
    name = tmp_path.name
    FEED.append(name, *range(10))
    log, conns = MemoryLog(), Conns(MemoryStore())
    key = f"memory:{name}"
    with pytest.raises(SourceError, match="no load has read"):
        sourcing.skip_deleted(log, conns, key, "ops", "nothing read yet")
    first = run(log, conns, sourced(name, "r1", cap=4))
    assert Range.from_json(first.source_range).position == {"start": 0, "end": 4}
    with pytest.raises(sourcing.NothingToSkip, match="nothing to skip"):
        sourcing.skip_deleted(log, conns, key, "ops", "nothing deleted")
    FEED.trim(name, 7)  # a retention deletes 4..6 before any load read them
    with pytest.raises(SourceError, match=rf"records 4..6 were deleted before any load read them \(to go on "
                                          rf"without them: python -m twophase skip-deleted '{key}'\)"):
        coordinator.begin(log, sourced(name, "r2"))
    assert len(log.of_source(key)) == 1, "nothing is logged for a refused load"
    other = coordinator.begin(log, sourced(name + "-x", "r3", source=MemorySource(name + "-x")))
    assert other.source != key  # another source's load in flight is no obstacle to the skip

    skip = sourcing.skip_deleted(log, conns, key, "ops", "retention outran the pipeline")
    assert (skip.by, skip.why) == ("ops", "retention outran the pipeline")
    assert Range.from_json(skip.source_range) == Range(key, "memory", {"start": 4, "end": 7}, 3,
                                                       "deleted before any load read them")
    second = run(log, conns, sourced(name, "r2"))
    assert second.state == State.COMMITTED
    assert Range.from_json(second.source_range).position == {"start": 7, "end": 10}
    assert MemorySource(name).open().lag(sourcing.consumed(log.of_source(key), log.skips(key))) == 0

    FEED.trim(name, 10)
    FEED.append(name, 10, 11)
    third = coordinator.begin(log, sourced(name, "r4"))
    with pytest.raises(sourcing.SourceBusy, match=f"load {third.load_id} of the same source"):
        sourcing.skip_deleted(log, conns, key, "ops", "while a load reads it")
