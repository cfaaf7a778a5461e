"""The source contract: what a load reads, fixed before anything is read.

A *source* is where a pipeline's input comes from (a Kafka topic, a landing folder of
files, an in-memory list in tests). At begin it *fixes* the load's input: which records or
files the load reads, as plain data (its `Range`), logged with the load before the job
reads anything. The job then reads exactly that range; the committed load's range is what
it consumed. The next load's range starts where the last *committed* load's ended: a load
that aborted or crashed leaves its range to the next one, and committed ranges never
overlap and leave no gap. One load of a source is in flight at a time (the log refuses a
second: SourceBusy).

    begin task   fix(committed) -> Range   the next range, after the committed ones
    coordinator  follows(committed, fixed) why `fixed` does not continue the committed
                                           ranges (a gap or an overlap), [] when it does
    prepare      changed(fixed)            why the range no longer reads as fixed (a file
                                           that grew or vanished, offsets deleted by
                                           retention), [] when it still does
    operator     deleted(committed)        records gone before any load read them, to skip
    commit       mirror(fixed)             the committed position in the source's own
                                           tools (Kafka's consumer group), best effort
    status       lag(committed)            records or files not yet read by a committed
                                           load (None: cannot tell now)

A source is plain data (a dataclass, like a target) stored with the load's spec, so
recovery, `show` and the Transactions page rebuild it without the pipeline's code. Its
hooks that need a server take it in the constructor of a *reader* (`open(conns)`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ..errors import Terminal


class SourceError(Terminal):
    """The input cannot be read exactly once: it changed after it was fixed, records were
    deleted before they were read, the source was re-created. The load fails naming it."""


@dataclass(frozen=True)
class Range:
    """What one load reads of its source, fixed at begin (logged as JSON).

    - source: the source's key (the same for every load of that source);
    - kind: the source's kind;
    - position: the kind's own description of what is read (offsets per partition, a
      listing of files): compared by `follows` and read by the job;
    - records: how many records or files it holds, when the source can tell at begin;
    - note: what a person should know about it (a cap reached, partitions added);
    - behind: how many records or files the source held after the range when it was
      fixed (the pipeline's lag then, what a cap left for the next loads; 0 when the
      range reaches the source's end), None when the source cannot tell. The log keeps
      it, so the lag at each load's begin is known without asking the source's servers.
    """

    source: str
    kind: str
    position: dict[str, Any] = field(default_factory=dict)
    records: int | None = None
    note: str = ""
    behind: int | None = None

    @property
    def empty(self) -> bool:
        return self.records == 0

    def to_json(self) -> dict:
        return {"source": self.source, "kind": self.kind, "position": self.position, "records": self.records,
                "note": self.note, "behind": self.behind}

    @classmethod
    def from_json(cls, data: dict) -> "Range":
        return cls(data["source"], data["kind"], dict(data.get("position") or {}), data.get("records"),
                   data.get("note", ""), data.get("behind"))


class SourceReader(ABC):
    """A source's hooks, with the servers they need (see the module doc)."""

    @abstractmethod
    def fix(self, committed: list[Range]) -> Range:
        """The next load's range: what follows the committed loads' ranges (oldest first;
        none yet: the source's configured start), with what the source holds after it
        (`behind`). SourceError when that cannot be read exactly once (the next records
        were deleted, the source was re-created)."""

    @abstractmethod
    def follows(self, committed: list[Range], fixed: Range) -> list[str]:
        """Why `fixed` does not continue the committed ranges (oldest first) exactly: a gap
        or an overlap, each named. [] when it does."""

    @abstractmethod
    def changed(self, fixed: Range) -> list[str]:
        """Why the range no longer reads as it was fixed, each named; [] when it does."""

    def deleted(self, committed: list[Range]) -> Range | None:
        """The records after the committed ranges that are gone before any load read them
        (a retention), as the range an operator may skip (sourcing.skip_deleted); None when
        none are. By default a source never deletes what no load read."""
        return None

    def mirror(self, fixed: Range) -> None:
        """After the load that read `fixed` committed: show where reading got to in the
        source's own tools (Kafka: the group's committed offsets, for its lag). Best effort:
        the log's committed ranges are the truth, and the next load mirrors its own end.
        By default a source has nothing to show."""

    @abstractmethod
    def lag(self, committed: list[Range]) -> int | None:
        """Records or files after the last committed range, now; an upper bound where the
        source cannot count them exactly (Kafka counts offsets, transaction markers too);
        None when unknown."""


class Source(ABC):
    """A source as plain data: what a load's spec stores (see the module doc)."""

    kind: str = ""
    unit: str = "record(s)"  # what a range's records and behind count: records, offsets or files

    @property
    @abstractmethod
    def key(self) -> str:
        """The source's identity across loads: loads with the same key continue each
        other's ranges, one at a time."""

    @abstractmethod
    def open(self, conns) -> SourceReader:
        """The hooks, with the servers of `conns` (twophase.connections.Connections)."""

    def server(self, conns) -> str:
        """The address of the server the source lives on ('' for none: files, memory), to
        find a participant on the same server (Participant.carry_source)."""
        return ""

    def frame(self, spark, fixed: Range, conns):
        """The range as a Spark DataFrame: exactly the records or lines it holds (the
        prepare job reads its input this way); `conns` the job's servers (None outside a
        job's run: a kind that needs them says so). A kind Spark cannot read says so."""
        raise SourceError(f"{self.key}: a {self.kind} source cannot be read by Spark")

    def describe(self, fixed: Range) -> str:
        """One line on what the load reads."""
        count = "" if fixed.records is None else f"{fixed.records} {self.unit}"
        return f"{self.key}: {count or 'a range'}" + (f" ({fixed.note})" if fixed.note else "")
