"""A participant's vote: yes or no, what it staged per target, and what phase 2 needs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Vote:
    participant: str
    yes: bool
    count: int                      # rows or records staged for the load, over all its targets
    # What the participant's own commit and abort read (a gid, offset ranges...). Only that
    # participant interprets it; the log stores it as JSON (column `detail`).
    committable: dict[str, Any] = field(default_factory=dict)
    reason: str = ""                # why the vote is no
    counts: dict[str, int] = field(default_factory=dict)  # per target: rows or records staged
    summary: str = ""               # one line for logs and the UI: where the load is staged

    def no(self, reason: str) -> "Vote":
        """The same vote turned no, for `reason`."""
        return replace(self, yes=False, reason=reason)

    def to_json(self) -> dict:
        return asdict(self)

    def counts_or_total(self) -> dict[str, int]:
        """Per-target counts; a vote logged before they were recorded has only its total."""
        return self.counts or {self.participant: self.count}
