"""A folder of files as a source: the listing a load reads (each file's URI, size and
modification time) is fixed at begin, and a file that changes or vanishes after that fails
the load, named.

Two modes:
- `interval`: the folder of the load's data interval (the DAG names it, e.g.
  `.../date=2026-11-20`): every load of it reads the whole listing (a replace load reads
  it again); the data interval already makes it exactly once.
- `new`: one landing folder; each load reads the files no committed load of the source
  read, at most `cap` of them (oldest first), so each file is loaded exactly once whenever
  it lands, an aborted load's files included. A file is known by its URI: one that is
  rewritten under a name already loaded is not loaded again (and `lag` does not count it).

The folder's own files are read. Hidden ones (a name starting with '_' or '.', Hadoop's
mark of markers and files still being written) and files in subfolders are not: each is
listed in the range with why (`skipped`), for the vote's gate and for people.

Folders are storage URIs (file://, s3://, hdfs://; a plain absolute path is a local one;
s3a:// is read as s3://), listed with pyarrow's file systems: the begin task needs no JVM.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spark.storage import filesystem
from .contract import Range, Source, SourceError, SourceReader

MODES = ("interval", "new")


@dataclass(frozen=True)
class FilesSource(Source):
    folder: str
    mode: str = "new"
    cap: int = 0  # at most this many files per load in mode new (0: all there are)
    kind = "files"
    unit = "file(s)"

    def __post_init__(self):
        if self.mode not in MODES:
            raise SourceError(f"files source {self.folder}: mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not isinstance(self.cap, int) or self.cap < 0:
            raise SourceError(f"files source {self.folder}: cap must be a whole number >= 0, got {self.cap!r}")

    @property
    def key(self) -> str:
        return f"files:{self.folder.rstrip('/')}"

    def open(self, conns=None) -> "FilesReader":
        return FilesReader(self)

    def describe(self, fixed: Range) -> str:
        skipped = fixed.position.get("skipped", [])
        return (f"{self.key}: {fixed.records} {self.unit}, {sum(f[1] for f in fixed.position.get('files', []))} bytes"
                + (f"; {len(skipped)} not read (hidden or in a subfolder)" if skipped else "")
                + (f" ({fixed.note})" if fixed.note else ""))

    def frame(self, spark, fixed: Range, conns=None):
        """The lines of the listed files: `value` (the line's text) and `file` (its URI),
        read with Spark's text reader (its Hadoop file systems: s3a:// as given). The file
        is input_file_name(), not the `_metadata` column: that one builds a struct of six
        fields for every line, a fifth of what reading a million lines costs, where most
        jobs name the file of a rejected line only."""
        from pyspark.sql import functions as F

        uris = [uri for uri, _, _ in fixed.position.get("files", [])]
        if not uris:
            return spark.createDataFrame([], "value string, file string")
        return spark.read.text(uris).withColumn("file", F.input_file_name())


def not_read(relative: str, folder: str = "the folder") -> str | None:
    """Why a file of a folder (its name relative to the folder) is not read, or None: it is
    in a subfolder, or its name is hidden (Hadoop's mark of markers and files still being
    written). `folder`: how the reason names the folder."""
    parts = relative.split("/")
    if len(parts) > 1:
        return f"in the subfolder {'/'.join(parts[:-1])}/ (only {folder}'s own files are read)"
    if relative.startswith(("_", ".")):
        return "hidden name (starts with '_' or '.': a marker or a file being written)"
    return None


class FilesReader(SourceReader):
    def __init__(self, source: FilesSource):
        self.source = source

    def listing(self) -> tuple[list[list], list[list]]:
        """([uri, size, mtime_ns] of each file read, sorted by modification time then URI;
        [name relative to the folder, size, why not read] of each skipped one)."""
        import pyarrow.fs as pafs

        fs, root = filesystem(self.source.folder)
        found = fs.get_file_info(root)
        if found.type == pafs.FileType.NotFound:
            raise SourceError(f"{self.source.key}: the folder does not exist")
        if found.type != pafs.FileType.Directory:
            raise SourceError(f"{self.source.key}: it is a file, not a folder")
        prefix = root.rstrip("/") + "/"
        base = self.source.folder.rstrip("/") + "/"
        read, skipped = [], []
        for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
            if info.type != pafs.FileType.File:
                continue
            relative = info.path[len(prefix):]
            why = not_read(relative)
            if why:
                skipped.append([relative, info.size, why])
            else:
                read.append([base + relative, info.size, info.mtime_ns])
        return sorted(read, key=lambda f: (f[2], f[0])), sorted(skipped)

    def not_landed(self, marker: str = "") -> str | None:
        """Why the folder's input has not landed yet, or None once it has: the folder
        exists and, with a `marker` (a file name such as `_SUCCESS`, which a writer makes
        when it has written everything), holds that file. One or two requests. A file where
        the folder should be: SourceError; a file system that does not answer: its OSError
        (a caller may look again)."""
        import pyarrow.fs as pafs

        fs, root = filesystem(self.source.folder)
        found = fs.get_file_info(root)
        if found.type == pafs.FileType.NotFound:
            return "the folder does not exist yet"
        if found.type != pafs.FileType.Directory:
            raise SourceError(f"{self.source.key}: it is a file, not a folder")
        if marker and fs.get_file_info(root.rstrip("/") + "/" + marker).type != pafs.FileType.File:
            return f"the folder has no {marker} yet (its writer makes it when it has written everything)"
        return None

    def fix(self, committed: list[Range]) -> Range:
        read, skipped = self.listing()
        note, behind = "", 0
        if self.source.mode == "new":
            done = _uris(committed)
            new = [f for f in read if f[0] not in done]
            read = new[:self.source.cap] if self.source.cap else new
            behind = len(new) - len(read)
            if behind:
                note = f"capped at {self.source.cap} file(s): {behind} left for the next load"
        return Range(self.source.key, self.source.kind, {"files": read, "skipped": skipped}, len(read), note, behind)

    def follows(self, committed: list[Range], fixed: Range) -> list[str]:
        if self.source.mode != "new":
            return []
        again = sorted(_uris([fixed]) & _uris(committed))
        return [f"{self.source.key}: {uri} was read by a committed load (an overlap)" for uri in again[:20]] + (
            [f"... and {len(again) - 20} more"] if len(again) > 20 else [])

    def changed(self, fixed: Range) -> list[str]:
        fs, root = filesystem(self.source.folder)
        base = self.source.folder.rstrip("/") + "/"
        listed = fixed.position.get("files", [])
        # One request for all of them: each file's path on the folder's file system.
        now = fs.get_file_info([root.rstrip("/") + "/" + uri[len(base):] for uri, _, _ in listed])
        problems = []
        for (uri, size, mtime), info in zip(listed, now):
            if info.size is None:
                problems.append(f"{uri} vanished after the load listed it")
            elif (info.size, info.mtime_ns) != (size, mtime):
                problems.append(f"{uri} changed after the load listed it: {size} bytes then, {info.size} now"
                                + ("" if info.size != size else " (rewritten)"))
        return problems

    def lag(self, committed: list[Range]) -> int | None:
        if self.source.mode != "new":
            return None
        done = _uris(committed)
        return sum(1 for f in self.listing()[0] if f[0] not in done)


def _uris(ranges: list[Range]) -> set[str]:
    return {f[0] for r in ranges for f in r.position.get("files", [])}
