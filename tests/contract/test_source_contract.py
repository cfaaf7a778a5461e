"""The source contract suite (twophase/sources/contract.py), run over every kind of source
(source_feeds.FEEDS): ranges fixed load after load continue each other exactly (each record
read once, none skipped, an aborted load's range read again), a cap leaves the rest for
the next load, a range that no longer reads as fixed is named, `follows` rejects an
overlap, and `lag` counts what no committed load read yet."""

from __future__ import annotations

import pytest

from source_feeds import FEEDS, feed_for
from twophase.sources import Range

pytestmark = pytest.mark.serverless


@pytest.fixture(params=FEEDS)
def kind(request) -> str:
    return request.param


def test_committed_ranges_read_every_record_once_while_the_source_grows(kind, tmp_path):
    feed = feed_for(kind, tmp_path)
    committed: list[Range] = []
    read: list = []
    for grown in (5, 0, 3, 7, 1):
        feed.add(grown)
        fixed = feed.reader.fix(committed)
        assert fixed.source == feed.source.key and fixed.kind == feed.source.kind
        assert feed.reader.follows(committed, fixed) == []
        assert fixed.records == grown and fixed.empty == (grown == 0)
        assert feed.reader.changed(fixed) == []
        read += feed.read(fixed)
        committed.append(Range.from_json(fixed.to_json()))  # as the log keeps it
    assert len(read) == len(set(read)) == 16
    assert feed.reader.lag(committed) == 0


def test_an_aborted_loads_range_is_read_again_by_the_next(kind, tmp_path):
    feed = feed_for(kind, tmp_path)
    feed.add(4)
    first = feed.reader.fix([])
    feed.add(2)
    aborted = feed.reader.fix([first])  # read, then rolled back: never committed
    feed.add(3)
    again = feed.reader.fix([first])
    assert set(feed.read(aborted)) < set(feed.read(again)) and again.records == 5
    assert feed.reader.follows([first], again) == []


def test_a_cap_leaves_the_rest_for_the_next_loads(kind, tmp_path):
    feed = feed_for(kind, tmp_path, cap=3)
    feed.add(7)
    committed, sizes = [], []
    while True:
        fixed = feed.reader.fix(committed)
        if fixed.empty:
            break
        sizes.append(fixed.records)
        assert ("left for the next load" in fixed.note or "more to read" in fixed.note) == (len(sizes) < 3)
        committed.append(fixed)
    assert sizes == [3, 3, 1]
    assert sorted(sum((feed.read(r) for r in committed), [])) == sorted(set(sum((feed.read(r) for r in committed), [])))


def test_an_overlap_with_a_committed_range_is_named(kind, tmp_path):
    feed = feed_for(kind, tmp_path)
    feed.add(3)
    first = feed.reader.fix([])
    feed.add(2)
    wrong = feed.reader.follows([first], first)  # the same range fixed twice
    assert wrong and "overlap" in wrong[0] and feed.source.key in wrong[0]


def test_a_range_that_no_longer_reads_as_fixed_is_named(kind, tmp_path):
    feed = feed_for(kind, tmp_path)
    feed.add(3)
    fixed = feed.reader.fix([])
    feed.change(fixed)
    changed = feed.reader.changed(fixed)
    assert changed and all(isinstance(line, str) and line for line in changed), changed


def test_lag_counts_what_no_committed_load_read(kind, tmp_path):
    feed = feed_for(kind, tmp_path)
    feed.add(6)
    assert feed.reader.lag([]) == 6
    first = feed.reader.fix([])
    feed.add(2)
    assert feed.reader.lag([first]) == 2
