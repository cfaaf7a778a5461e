"""A participant's vote: yes or no, what it staged, and what phase 2 needs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Vote:
    participant: str
    yes: bool
    count: int                      # rows (Postgres) or records (Kafka) staged for the load
    detail: dict[str, Any] = field(default_factory=dict)  # gid, offset ranges, attempts, ...
    reason: str = ""                # why the vote is no

    def to_json(self) -> dict:
        return asdict(self)
