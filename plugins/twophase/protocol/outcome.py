"""Typed results of a participant's commit or abort: never a bare bool."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Kind(str, Enum):
    DONE = "done"                  # this call did it
    ALREADY_DONE = "already done"  # an earlier attempt did it; nothing changed now
    RETRY_LATER = "retry later"    # transient (server down, fenced by a live attempt): safe to retry
    FAILED = "failed"              # cannot be done; `reason` says why


@dataclass(frozen=True)
class Outcome:
    participant: str
    kind: Kind
    reason: str = ""
    counts: dict = field(default_factory=dict)  # what the call did, for people (rows, files...)
    # A commit that is DONE or ALREADY_DONE: per target, the rows or records of the load
    # readers see now. The coordinator compares them with the vote (voting.commit_problems).
    visible: dict[str, int] = field(default_factory=dict)
    seconds: float | None = None   # how long the call took, set by the coordinator

    @property
    def ok(self) -> bool:
        return self.kind in (Kind.DONE, Kind.ALREADY_DONE)

    def describe(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items())
        took = f"in {self.seconds:.3f} s" if self.seconds is not None else ""
        parts = [f"{self.participant}: {self.kind.value}", counts, took, self.reason]
        return "; ".join(p for p in parts if p)
