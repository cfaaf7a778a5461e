"""The source contract suite (twophase/sources/contract.py), run over every kind of source
(source_feeds.FEEDS): ranges fixed load after load continue each other exactly (each record
read once, none skipped, an aborted load's range read again), a cap leaves the rest for
the next load, a range that no longer reads as fixed is named, `follows` rejects an
overlap, and `lag` counts what no committed load read yet, as a range's `behind` did when
it was fixed."""

from __future__ import annotations

import pytest

from source_feeds import FEEDS, SERVERLESS, feed_for
from twophase.sources import Range


@pytest.fixture(params=[pytest.param(kind, marks=[pytest.mark.serverless] if kind in SERVERLESS else [])
                        for kind in FEEDS])
def kind(request) -> str:
    return request.param


@pytest.fixture
def feed_of(kind, tmp_path, request):
    """feed_of(cap=0): a fresh feed of the kind under test (closed after the test)."""
    made = []

    def make(cap: int = 0):
        made.append(feed_for(kind, tmp_path / str(len(made)), cap, request))
        return made[-1]
    yield make
    for feed in made:
        getattr(feed, "close", lambda: None)()


def test_committed_ranges_read_every_record_once_while_the_source_grows(feed_of):
    feed = feed_of()
    committed: list[Range] = []
    read: list = []
    for grown in (5, 0, 3, 7, 1):
        feed.add(grown)
        fixed = feed.reader.fix(committed)
        assert fixed.source == feed.source.key and fixed.kind == feed.source.kind
        assert feed.reader.follows(committed, fixed) == []
        assert fixed.empty == (grown == 0) and (fixed.records is None or fixed.records >= grown)
        assert fixed.behind in (0, None), "an uncapped range reaches the source's end"
        assert feed.reader.changed(fixed) == []
        got = feed.read(fixed)
        assert len(got) == grown, (grown, got, fixed)
        read += got
        committed.append(Range.from_json(fixed.to_json()))  # as the log keeps it
    assert len(read) == len(set(read)) == 16
    assert feed.reader.lag(committed) == 0


def test_an_aborted_loads_range_is_read_again_by_the_next(feed_of):
    feed = feed_of()
    feed.add(4)
    first = feed.reader.fix([])
    feed.add(2)
    aborted = feed.reader.fix([first])  # read, then rolled back: never committed
    feed.add(3)
    again = feed.reader.fix([first])
    assert set(feed.read(aborted)) < set(feed.read(again)) and len(feed.read(again)) == 5
    assert feed.reader.follows([first], again) == []


def test_a_cap_leaves_the_rest_for_the_next_loads(feed_of):
    feed = feed_of(cap=3)
    feed.add(7)
    committed, read, capped = [], [], []
    while not (fixed := feed.reader.fix(committed)).empty:
        got = feed.read(fixed)
        assert len(got) <= 3 and (fixed.records is None or fixed.records <= 3), fixed
        assert fixed.behind is None or fixed.behind == feed.reader.lag(committed + [fixed]), fixed
        read += got
        capped.append(bool(fixed.note))
        committed.append(fixed)
    assert sorted(read) == sorted(set(read)) and len(read) == 7
    assert len(committed) >= 3 and all(capped[:-1]) and not capped[-1], capped


def test_an_overlap_with_a_committed_range_is_named(feed_of):
    feed = feed_of()
    feed.add(3)
    first = feed.reader.fix([])
    feed.add(2)
    wrong = feed.reader.follows([first], first)  # the same range fixed twice
    assert wrong and "overlap" in wrong[0] and feed.source.key in wrong[0]


def test_a_range_that_no_longer_reads_as_fixed_is_named(feed_of):
    feed = feed_of()
    feed.add(3)
    fixed = feed.reader.fix([])
    feed.change(fixed)
    changed = feed.reader.changed(fixed)
    assert changed and all(isinstance(line, str) and line for line in changed), changed


def test_lag_counts_what_no_committed_load_read(feed_of):
    feed = feed_of()
    feed.add(6)
    exact = feed.source.kind != "kafka"  # Kafka counts offsets: transaction markers too
    assert feed.reader.lag([]) == 6 if exact else feed.reader.lag([]) >= 6
    first = feed.reader.fix([])
    feed.add(2)
    assert feed.reader.lag([first]) == 2 if exact else 2 <= feed.reader.lag([first]) < feed.reader.lag([])
