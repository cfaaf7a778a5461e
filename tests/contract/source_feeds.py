"""The source contract suite's feeds: one per kind of source, each a source under test and
the means to grow it, change it and read a range of it as its job would (record ids)."""

from __future__ import annotations

import os
from pathlib import Path

from twophase.sources import Range
from twophase.sources.files import FilesSource
from twophase.sources.memory import MemoryFeed, MemorySource

FEEDS = ("memory", "files")  # the serverless ones; the Kafka one joins with the stack


class MemorySourceFeed:
    """Records are ints 0, 1, 2...; a record id is the record."""

    def __init__(self, name: str, cap: int = 0):
        self.feed, self.name = MemoryFeed(), name
        self.source = MemorySource(name, cap)
        self.reader = self.source.open(feed=self.feed)
        self.unit = "record"

    def add(self, n: int) -> None:
        start = self.feed.bounds(self.name)[1]
        self.feed.append(self.name, *range(start, start + n))

    def read(self, fixed: Range) -> list:
        return self.reader.read(fixed)

    def change(self, fixed: Range) -> None:
        """Make the range no longer read as fixed (a retention deleted its first record)."""
        self.feed.trim(self.name, fixed.position["start"] + 1)


class FilesSourceFeed:
    """Each file is a record; its id is its name. A hidden file and a subfolder's file are
    there from the start: never read, always reported."""

    def __init__(self, folder: Path, cap: int = 0):
        self.folder, self.count = folder, 0
        folder.mkdir(parents=True)
        (folder / "_SUCCESS").write_text("")
        (folder / "late").mkdir()
        (folder / "late" / "x.json").write_text("{}\n")
        self.source = FilesSource(folder.as_uri(), "new", cap)
        self.reader = self.source.open()
        self.unit = "file"

    def add(self, n: int) -> None:
        for _ in range(n):
            path = self.folder / f"part-{self.count:05d}.json"
            path.write_text(f'{{"n": {self.count}}}\n')
            os.utime(path, ns=(10**18 + self.count, 10**18 + self.count))  # listed in the order they landed
            self.count += 1

    def read(self, fixed: Range) -> list:
        return [Path(uri.removeprefix("file://")).name for uri, _, _ in fixed.position["files"]]

    def change(self, fixed: Range) -> None:
        """Make the range no longer read as fixed (its first file grew)."""
        first = Path(fixed.position["files"][0][0].removeprefix("file://"))
        with first.open("a") as f:
            f.write('{"n": -1}\n')


def feed_for(kind: str, tmp_path: Path, cap: int = 0):
    if kind == "memory":
        return MemorySourceFeed(tmp_path.name, cap)
    if kind == "files":
        return FilesSourceFeed(tmp_path / "landing", cap)
    raise ValueError(f"no feed of kind {kind!r}")
