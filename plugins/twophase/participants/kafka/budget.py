"""The Kafka copy's budgets, checked by the vote before the decision: a load whose commit
copy cannot finish within the copy transaction's timeout, or whose staged records would
expire before the copy is done, is aborted by the vote with a reason that names the
setting to change, instead of failing in the middle of the commit.

The copy's pace comes from the pipeline's earlier copies (records / seconds of each
commit, its median). Copies of fewer than MIN_RECORDS records are mostly fixed cost
(connecting, fencing, committing offsets), not pace, and are not used; without a copy of
that size there is no estimate and the timeout budget is not checked (the copy's own
deadline still aborts an overlong copy cleanly).
"""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta

from ...protocol.outcome import Kind

MIN_RECORDS = 10_000
SHARE_OF_TIMEOUT = 0.8  # the copy must fit in this share of transaction.timeout.ms
RETENTION_MARGIN = timedelta(minutes=10)  # staged records must outlive the copy by this (the commit task's start, retries)


def copy_pace(earlier: list[dict]) -> tuple[float, int] | None:
    """(records per second, copies measured) over the earlier copies of at least
    MIN_RECORDS records; None without any."""
    paces = [o["count"] / o["seconds"] for o in earlier
             if o.get("kind") == Kind.DONE.value and (o.get("count") or 0) >= MIN_RECORDS and (o.get("seconds") or 0) > 0]
    return (statistics.median(paces), len(paces)) if paces else None


def over_budget(records: int, earlier: list[dict], transaction_timeout_ms: int, retention: dict[str, int],
                staged_since: datetime, now: datetime) -> str:
    """'' when copying `records` fits, else why not. `retention`: staging topic -> its
    retention.ms (-1: kept forever)."""
    pace = copy_pace(earlier)
    estimate = records / pace[0] if pace and records else 0.0
    reasons = []
    if estimate > SHARE_OF_TIMEOUT * transaction_timeout_ms / 1000:
        reasons.append(
            f"copying {records} records would take about {estimate:.1f} s at {pace[0]:.0f} records/s (the median "
            f"of the pipeline's last {pace[1]} copies), over {SHARE_OF_TIMEOUT:.0%} of the copy transaction's "
            f"timeout ({transaction_timeout_ms} ms): raise KafkaTarget.transaction_timeout_ms (and the broker's "
            "transaction.max.timeout.ms above it), or load less per run")
    needed = now + timedelta(seconds=estimate) + RETENTION_MARGIN
    for topic, ms in sorted(retention.items()):
        if ms < 0:
            continue
        expires = staged_since + timedelta(milliseconds=ms)
        if expires < needed:
            reasons.append(
                f"the staged records in {topic} may expire from {expires.isoformat(timespec='seconds')} "
                f"(retention.ms {ms}), before the copy ({estimate:.0f} s estimated) and a margin of "
                f"{RETENTION_MARGIN.total_seconds():.0f} s are done: raise KafkaTarget.staging_retention_ms "
                "(an existing staging topic keeps its own retention.ms: alter it), or decide sooner")
    return "; ".join(reasons)
