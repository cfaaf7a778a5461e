"""The quarantine: a load's rejected input lines, and the staged rows failing an audit
rule, kept where people can query them.

Table `twophase.quarantine` of the log's database, one row per kept line: the load, its
reason, where it came from (`source`: the file), what is wrong with it
(`detail`) and the line itself (`content`). At most `cap` lines per reason are kept per
load (default 10,000; the job's metrics count them all); a NUL character, which Postgres
text cannot hold, is kept as the four characters `\\x00`. Recovery deletes entries older
than the retention (default 7 days).

    capped(rejects_df, cap)                     the first `cap` lines of each reason, from a Spark frame

The log keeps them (twophase/log: the same database, the same contract for its memory twin):

    log.quarantine(load_id, lines)              the prepare job, before it stages (replaces the load's)
    log.quarantine(load_id, rows, reasons)      the audit: rows failing its rules (reason: the rule)
    log.quarantined(load_id, limit)             what `python -m twophase show LOAD --rejected` prints,
                                                and a rollback's log (rejected_report)
    log.sweep_quarantine(older_than, pipeline)  recovery's retention sweep
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..errors import SpecError

DEFAULT_CAP = 10_000
DEFAULT_RETENTION = timedelta(days=7)
COLUMNS = ("reason", "source", "detail", "content")  # the rejects frame's columns; only `reason` is required


@dataclass(frozen=True)
class Kept:
    reason: str
    source: str | None
    detail: str | None
    content: str | None
    kept_at: datetime | None = None

    def describe(self) -> str:
        """One line: where, why, and the line itself (shortened)."""
        content = self.content if self.content is None or len(self.content) <= 200 else self.content[:200] + "..."
        return (f"{self.source or '?'}: {self.reason}" + (f" ({self.detail})" if self.detail else "")
                + (f": {content!r}" if content is not None else ""))


def rejected_report(load_id: str, metrics: dict, input: dict, kept: list[Kept], shown: int = 20) -> list[str]:
    """What a rollback says of what the load rejected, a line each: how many input lines
    (by reason when the job counted them so) and where they are (the job's own rejects
    location when its input names one, or that nothing keeps them); then the first `shown`
    lines the quarantine kept (`kept` holds up to one more: rejected input lines, staged
    rows failing an audit rule)."""
    said = []
    rejected, by_reason = metrics.get("rejected_lines"), metrics.get("rejected_by_reason")
    if rejected:
        said.append(f"rejected input lines: {rejected}" + (f" (by reason: {by_reason})" if by_reason else ""))
        if input.get("rejects"):
            said.append(f"the job wrote them to {input['rejects']}")
        elif not kept:
            said.append("neither the quarantine nor a rejects location of the job keeps them (the job's Output "
                        "returned no rejects)")
    if kept:
        said.append(f"the first {min(shown, len(kept))} lines the quarantine kept (all of them: "
                    f"`python -m twophase show {load_id} --rejected`):")
        said += [f"  {k.describe()}" for k in kept[:shown]]
    return said


def capped(rejects, cap: int = DEFAULT_CAP) -> list[Kept]:
    """The first `cap` lines of each reason of a Spark DataFrame of rejects (columns
    `reason` and any of source, detail, content), collected to the driver in one job."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if cap < 0:
        raise SpecError(f"the quarantine's cap must be 0 or more lines per reason, not {cap}")
    if "reason" not in rejects.columns:
        raise SpecError(f"the job's rejects frame needs a 'reason' column; it has {rejects.columns}")
    columns = [F.col(c).cast("string").alias(c) if c in rejects.columns else F.lit(None).cast("string").alias(c)
               for c in COLUMNS]
    order = F.col("source") if "source" in rejects.columns else F.lit(1)
    numbered = rejects.select(*columns).withColumn(
        "n", F.row_number().over(Window.partitionBy("reason").orderBy(order)))
    return [Kept(*(r[c] for c in COLUMNS)) for r in numbered.where(F.col("n") <= cap).drop("n").collect()]
