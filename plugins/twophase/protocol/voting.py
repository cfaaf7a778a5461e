"""The vote: pure checks of the participants' votes, and the pipeline's quality rules.

`reasons_to_abort` returns every reason the load must not commit ([] means commit). It
reads only data, so it is unit-tested without servers; the coordinator adds the live
checks (the prepared transaction exists, the staged ranges are still there).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Protocol, Sequence

from .outcome import Outcome
from .votes import Vote


class QualityRule(Protocol):
    def __call__(self, expected_rows: int, metrics: Mapping[str, float], votes: dict[str, Vote]) -> str | None:
        """A reason to abort, or None when the rule holds. `metrics` are the figures the
        Spark job reported with its output (input lines, rejected lines...)."""


@dataclass(frozen=True)
class MinRows:
    """Abort when the load has fewer than `minimum` rows."""

    minimum: int

    def __call__(self, expected_rows: int, metrics: Mapping[str, float], votes: dict[str, Vote]) -> str | None:
        if expected_rows < self.minimum:
            return f"quality gate: {expected_rows} rows, below the minimum of {self.minimum}"
        return None


@dataclass(frozen=True)
class MaxRejectedShare:
    """Abort when more than `maximum` (0..1) of the input lines were rejected. Needs the
    job's metrics `input_lines` and `rejected_lines`; a gate below 1 without them aborts."""

    maximum: float

    def __call__(self, expected_rows: int, metrics: Mapping[str, float], votes: dict[str, Vote]) -> str | None:
        if self.maximum >= 1:
            return None
        if "input_lines" not in metrics or "rejected_lines" not in metrics:
            return ("quality gate: the job reported no input_lines and rejected_lines, "
                    f"so the maximum rejected share of {self.maximum:.2%} cannot be checked")
        total, rejected = metrics["input_lines"], metrics["rejected_lines"]
        share = rejected / total if total else 0.0
        if share > self.maximum:
            return (f"quality gate: {rejected} of {total} input lines rejected ({share:.2%}), "
                    f"above the maximum of {self.maximum:.2%}")
        return None


@dataclass(frozen=True)
class MaxSkippedFiles:
    """Abort when the job left more than `maximum` non-empty input files unread. Reads the
    job's metrics `skipped_files` (a count) and `skipped_paths` ([{path, bytes, why}]); a
    job that does not report them is not checked."""

    maximum: int

    def __call__(self, expected_rows: int, metrics: Mapping[str, float], votes: dict[str, Vote]) -> str | None:
        skipped = metrics.get("skipped_files", 0)
        if skipped <= self.maximum:
            return None
        listed = metrics.get("skipped_paths") or []
        names = ", ".join(f"{p['path']} ({p['bytes']} bytes: {p['why']})" for p in listed[:3])
        more = f" and {skipped - 3} more" if skipped > 3 else ""
        return (f"quality gate: {skipped} input files were not read, above the maximum of {self.maximum}: "
                f"{names}{more}")


def reasons_to_abort(planned: Mapping[str, Sequence[str]], votes: dict[str, Vote],
                     expected: Mapping[str, int] | None, rules: list[QualityRule] = (),
                     metrics: Mapping[str, float] | None = None, expected_rows: int | None = None) -> list[str]:
    """Every reason the load must not commit. `planned`: each participant's targets;
    `expected`: Spark's rows per target (each yes vote's claims are checked against them:
    claim_problems); `expected_rows`, what the quality rules judge (default: the largest
    target's rows)."""
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
    if expected is None:
        reasons.append("Spark's row count was not recorded")
    else:
        for name, vote in votes.items():
            if vote.yes:
                reasons += claim_problems(name, planned.get(name, ()), vote, expected)
    if not reasons:
        rows = expected_rows if expected_rows is not None else max(expected.values(), default=0)
        for rule in rules:
            reason = rule(rows, metrics or {}, votes)
            if reason:
                reasons.append(reason)
    return reasons


def claim_problems(name: str, targets: Sequence[str], vote: Vote, expected: Mapping[str, int]) -> list[str]:
    """What is wrong with a yes vote's claims ([] when nothing): it must be the vote of
    participant `name`, count every one of its targets and nothing else, its counts must
    add up to its total, and each must be the rows Spark computed for that target. A load
    logged before targets had names has Spark's count under the participant's name (the
    log's old form): a vote's total is compared with it, whatever its counts (a readied
    vote of this release has them, the logged one does not)."""
    if vote.participant != name:
        return [f"the vote of {name} names another participant, {vote.participant}"]
    if name in expected and not set(targets) & set(expected):  # the old form: one count per participant
        return [] if vote.count == expected[name] else [
            f"{name} staged {vote.count} for {name}, but Spark computed {expected[name]}"]
    if not vote.counts:
        return [f"{name} voted yes without its rows per target"]
    problems = []
    missing, extra = sorted(set(targets) - set(vote.counts)), sorted(set(vote.counts) - set(targets))
    if missing:
        problems.append(f"{name} voted yes but counted nothing for {', '.join(missing)}")
    if extra:
        problems.append(f"{name} counted rows for {', '.join(extra)}, which it does not write")
    if sum(vote.counts.values()) != vote.count:
        problems.append(f"{name}'s rows per target add up to {sum(vote.counts.values())}, but its total is "
                        f"{vote.count}")
    for target, count in vote.counts.items():
        if target in targets and count != expected.get(target):
            problems.append(f"{name} staged {count} for {target}, but Spark computed "
                            f"{expected.get(target, 'nothing')}")
    return problems


def commit_problems(vote: Vote, outcome: Outcome) -> list[str]:
    """What is wrong with a commit that says it is done ([] when nothing): it must be the
    outcome of the vote's participant and make exactly the voted rows visible, per target
    (`Outcome.visible`): fewer is data lost, more is data doubled, and a target it says
    nothing of is data nobody checked. A vote of the log's old form (a total, no counts per
    target) is compared by its total."""
    name = vote.participant
    if outcome.participant != name:
        return [f"the commit outcome of {name} names another participant, {outcome.participant}"]
    if not vote.counts:
        made = sum(outcome.visible.values())
        return [] if made == vote.count and outcome.visible else [
            f"{name} committed {made if outcome.visible else 'nothing it could count'}, but voted {vote.count}"]
    problems = []
    unsaid = sorted(set(vote.counts) - set(outcome.visible))
    if unsaid:
        problems.append(f"{name} says its commit is done but not what it made visible in {', '.join(unsaid)}")
    for target, made in outcome.visible.items():
        voted = vote.counts.get(target)
        if voted is None:
            problems.append(f"{name} made {made} visible in {target}, which it did not vote for")
        elif made != voted:
            problems.append(f"{name} made {made} visible in {target}, but voted {voted}")
    return problems


def owned(vote: Vote, name: str) -> Vote:
    """The vote a hook of participant `name` returned, as the log may keep it under that
    name: unchanged when it is that participant's, else turned no (keeping what its
    commit and abort would read, so that the abort releases what the hook took). A vote
    under another's name would replace that participant's vote in the log."""
    if vote.participant == name:
        return vote
    return replace(vote, participant=name, yes=False,
                   reason=f"its vote names another participant, {vote.participant}")
