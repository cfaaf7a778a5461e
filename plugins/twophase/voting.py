"""The vote: pure checks of the participants' votes, and the pipeline's quality rules.

`reasons_to_abort` returns every reason the load must not commit ([] means commit). It
reads only data, so it is unit-tested without servers; the coordinator adds the live
checks (the prepared transaction exists, the staged ranges are still there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .votes import Vote


class QualityRule(Protocol):
    def __call__(self, expected_rows: int, votes: dict[str, Vote]) -> str | None:
        """A reason to abort, or None when the rule holds."""


@dataclass(frozen=True)
class MinRows:
    """Abort when the load has fewer than `minimum` rows."""

    minimum: int

    def __call__(self, expected_rows: int, votes: dict[str, Vote]) -> str | None:
        if expected_rows < self.minimum:
            return f"quality gate: {expected_rows} rows, below the minimum of {self.minimum}"
        return None


def reasons_to_abort(planned: list[str], votes: dict[str, Vote], expected_rows: int | None,
                     rules: list[QualityRule] = ()) -> list[str]:
    reasons = []
    for name in planned:
        vote = votes.get(name)
        if vote is None:
            reasons.append(f"{name} did not vote")
        elif not vote.yes:
            reasons.append(f"{name} voted no: {vote.reason}")
    for name in votes:
        if name not in planned:
            reasons.append(f"unexpected vote from {name}, which is not a planned participant")
    if expected_rows is None:
        reasons.append("Spark's row count was not recorded")
    else:
        for vote in votes.values():
            if vote.count != expected_rows:
                reasons.append(f"{vote.participant} staged {vote.count}, but Spark computed {expected_rows}")
    if not reasons:
        for rule in rules:
            reason = rule(expected_rows, votes)
            if reason:
                reasons.append(reason)
    return reasons
