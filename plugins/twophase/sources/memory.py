"""An in-memory source for serverless tests: a named list of records that grows, read in
ranges of positions [start, end), optionally capped; `trim` drops the oldest records as a
retention would; `shown` is the position a committed load showed (as a Kafka source's
consumer group offsets)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .contract import Range, Source, SourceError, SourceReader


class MemoryFeed:
    """The records of the in-memory sources, by name (a stand-in for a topic)."""

    def __init__(self) -> None:
        self._records: dict[str, list] = {}
        self._first: dict[str, int] = {}  # the oldest position still kept
        self.shown: dict[str, int] = {}  # the end of the last range mirrored (SourceReader.mirror)
        self._lock = threading.Lock()

    def append(self, name: str, *records) -> None:
        with self._lock:
            self._records.setdefault(name, []).extend(records)

    def trim(self, name: str, first: int) -> None:
        """Forget the records before position `first` (a retention)."""
        with self._lock:
            self._first[name] = max(self._first.get(name, 0), first)

    def bounds(self, name: str) -> tuple[int, int]:
        with self._lock:
            return self._first.get(name, 0), len(self._records.get(name, []))

    def read(self, name: str, start: int, end: int) -> list:
        first, _ = self.bounds(name)
        if start < first:
            raise SourceError(f"memory source {name}: records {start}..{first - 1} were deleted before they were read")
        with self._lock:
            return self._records[name][start:end]


FEED = MemoryFeed()  # the tests' default feed (a process's memory, as MemoryStore)


@dataclass(frozen=True)
class MemorySource(Source):
    """Records of FEED's list `name`; at most `cap` per load (0: all there are)."""

    name: str
    cap: int = 0
    kind = "memory"

    @property
    def key(self) -> str:
        return f"memory:{self.name}"

    def open(self, conns=None, feed: MemoryFeed | None = None) -> "MemoryReader":
        return MemoryReader(self, feed or FEED)


class MemoryReader(SourceReader):
    def __init__(self, source: MemorySource, feed: MemoryFeed):
        self.source, self.feed = source, feed

    def _range(self, start: int, end: int, note: str = "", behind: int | None = None) -> Range:
        return Range(self.source.key, self.source.kind, {"start": start, "end": end}, end - start, note, behind)

    def fix(self, committed: list[Range]) -> Range:
        first, last = self.feed.bounds(self.source.name)
        start = committed[-1].position["end"] if committed else 0
        if start < first:
            raise SourceError(f"{self.source.key}: records {start}..{first - 1} were deleted before any load read "
                              f"them (to go on without them: python -m twophase skip-deleted '{self.source.key}')")
        end = min(last, start + self.source.cap) if self.source.cap else last
        return self._range(start, end, "capped: more to read" if end < last else "", last - end)

    def follows(self, committed: list[Range], fixed: Range) -> list[str]:
        expected = committed[-1].position["end"] if committed else 0
        start = fixed.position["start"]
        if start > expected:
            return [f"{self.source.key}: positions {expected}..{start - 1} would never be read (a gap)"]
        if start < expected:
            return [f"{self.source.key}: positions {start}..{expected - 1} were read by a committed load (an overlap)"]
        return []

    def changed(self, fixed: Range) -> list[str]:
        first, last = self.feed.bounds(self.source.name)
        start, end = fixed.position["start"], fixed.position["end"]
        if start < first:
            return [f"{self.source.key}: records {start}..{min(first, end) - 1} were deleted before they were read"]
        if end > last:
            return [f"{self.source.key}: records {last}..{end - 1} are gone"]
        return []

    def deleted(self, committed: list[Range]) -> Range | None:
        first, _ = self.feed.bounds(self.source.name)
        start = committed[-1].position["end"] if committed else 0
        return self._range(start, first, "deleted before any load read them") if start < first else None

    def mirror(self, fixed: Range) -> None:
        self.feed.shown[self.source.name] = fixed.position["end"]

    def lag(self, committed: list[Range]) -> int | None:
        return self.feed.bounds(self.source.name)[1] - (committed[-1].position["end"] if committed else 0)

    def read(self, fixed: Range) -> list:
        """The range's records (what a job reads)."""
        return self.feed.read(self.source.name, fixed.position["start"], fixed.position["end"])
