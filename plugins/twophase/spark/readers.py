"""Readers of common line formats with a schema: CSV and JSON lines, judged in Spark's JVM.

    from twophase.spark.readers import read_csv

    def build(spark, spec):
        read = read_csv(spark, spec, {"ts": "timestamp", "url": "string", "user_id": "string"})
        views = read.rows.groupBy(...)...
        return Output(views, read.metrics, rejects=read.rejects)

They read exactly the load's input (read_source: the files its folder source listed at
begin) and account for every line, once:

    input_lines = rows + rejected_lines + blank_lines + header_lines

- a row: every column of the schema present (or allowed to be missing: `optional`) and of
  its type (Spark's own casts: `try_cast`), in `rows` with the schema's columns and types;
- rejected, with a reason (rejected_by_reason; `rejects` holds each line with its reason,
  file, detail and content, for the quarantine):
    malformed         not a JSON object / a CSV line Spark cannot split
    too_many_fields   a CSV line with more fields than the schema has columns
    missing_<column>  the column is absent, empty or null
    bad_<column>      its value is not of the column's type (detail: the value and type)
  the first of these that applies, in this order and the schema's column order;
- blank (only white space) and, for CSV with `header`, a line that is the header itself
  (the schema's names joined by the separator): counted, not rejected.

The files the source listed but does not read (hidden names, subfolders) are in the
metrics too (skipped_files, skipped_bytes, skipped_paths), for the vote's gate. Nothing is
parsed in Python: a line crosses to Python only in `rejects`, capped by the quarantine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .. import schema as schemas
from ..errors import SpecError
from .job import read_source

log = logging.getLogger("twophase.readers")
MAX_LISTED = 100  # skipped_paths lists at most this many files (all are counted)
_CORRUPT, _EXTRA, _PART = "_twophase_corrupt", "_twophase_extra", "_twophase_part"


@dataclass
class Lines:
    """What a reader read: `rows` (a DataFrame of the schema's columns), `rejects` (reason,
    source, detail, content: Output's rejects), and the metrics of the job's contract."""

    rows: object
    rejects: object
    metrics: dict


def read_csv(spark, spec, schema: dict, *, header: bool = True, sep: str = ",", optional: tuple = ()) -> Lines:
    """The load's CSV lines (no line breaks inside fields) as rows of `schema` ({column:
    Spark type}, in the files' column order); see the module doc."""
    from pyspark.sql import functions as F

    declared = schemas.check(schema, "read_csv schema")
    raw = ", ".join(f"`{c}` string" for c in [*declared, _EXTRA])
    parsed = F.from_csv(F.col("value"), raw, {"sep": sep, "mode": "PERMISSIVE"})
    header_line = sep.join(declared) if header else None
    return _judge(spark, spec, declared, parsed, F.lit(False), optional, header_line,
                  too_many=F.col(f"parsed.{_EXTRA}").isNotNull())


def read_json_lines(spark, spec, schema: dict, *, optional: tuple = ()) -> Lines:
    """The load's JSON lines (one object per line; keys the schema does not name are
    ignored) as rows of `schema` ({column: Spark type}); see the module doc."""
    from pyspark.sql import functions as F

    declared = schemas.check(schema, "read_json_lines schema")
    raw = ", ".join(f"`{c}` string" for c in [*declared, _CORRUPT])
    parsed = F.from_json(F.col("value"), raw, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})
    malformed = F.col("parsed").isNull() | F.col(f"parsed.{_CORRUPT}").isNotNull()
    return _judge(spark, spec, declared, parsed, malformed, optional, None, too_many=F.lit(False))


def _judge(spark, spec, declared: dict, parsed, malformed, optional: tuple, header_line: str | None,
           too_many) -> Lines:
    from pyspark.sql import functions as F

    unknown = [c for c in optional if c not in declared]
    if unknown:
        raise SpecError(f"optional names {unknown}, which are not columns of the schema")
    lines = read_source(spark, spec).select("value", "file").withColumn("parsed", parsed)
    text = {c: F.col(f"parsed.`{c}`") for c in declared}
    typed = {c: F.expr(f"try_cast(parsed.`{c}` as {t})") for c, t in declared.items()}
    checks = [(malformed, F.lit("malformed"), F.lit("not one record of the format")),
              (too_many, F.lit("too_many_fields"), F.lit(f"more than {len(declared)} fields"))]
    checks += [(text[c].isNull() | (F.trim(text[c]) == ""), F.lit(f"missing_{c}"), F.lit(f"{c} is missing"))
               for c in declared if c not in optional]
    checks += [(text[c].isNotNull() & (F.trim(text[c]) != "") & typed[c].isNull(), F.lit(f"bad_{c}"),
                F.format_string(f"{c} %s is not a {t}", F.substring(text[c], 1, 100)))
               for c, t in declared.items()]
    reason, detail = F.lit(None).cast("string"), F.lit(None).cast("string")
    for failed, why, said in reversed(checks):  # the first that applies wins
        reason, detail = F.when(failed, why).otherwise(reason), F.when(failed, said).otherwise(detail)
    blank = F.trim(F.col("value")) == ""
    is_header = F.lit(False) if header_line is None else (F.trim(F.col("value")) == header_line)
    kind = F.when(blank, "blank").when(is_header, "header").when(reason.isNotNull(), "rejected").otherwise("row")
    rejected = kind == "rejected"  # a blank line or the header has no reason
    # spark_partition_id() is not deterministic: a filter that names it (kept) stays above
    # this projection, which then parses each line once; pushed below it, a filter on
    # `kind` would hold a copy of the parse for every column it judges.
    judged = lines.select("value", "file", *[typed[c].alias(c) for c in declared], kind.alias("kind"),
                          F.when(rejected, reason).alias("reason"), F.when(rejected, detail).alias("detail"),
                          F.spark_partition_id().alias(_PART))
    judged = judged.where(F.col(_PART) >= 0)
    counts = {(r["kind"], r["reason"]): r["n"] for r in judged.groupBy("kind", "reason").count()
              .withColumnRenamed("count", "n").collect()}
    by_reason = {reason: n for (kind_, reason), n in sorted(counts.items(), key=str) if kind_ == "rejected"}
    metrics = {"input_lines": sum(counts.values()), "rejected_lines": sum(by_reason.values()),
               "rejected_by_reason": by_reason, "blank_lines": counts.get(("blank", None), 0),
               **({"header_lines": counts.get(("header", None), 0)} if header_line is not None else {}),
               **skipped_metrics(spec)}
    log.info("read %d lines: %d rows, %d rejected %s, %d blank", metrics["input_lines"],
             counts.get(("row", None), 0), metrics["rejected_lines"], by_reason, metrics["blank_lines"])
    rows = judged.where(F.col("kind") == "row").select(*declared)
    rejects = judged.where(F.col("kind") == "rejected").select(
        "reason", F.col("file").alias("source"), "detail", F.col("value").alias("content"))
    return Lines(rows, rejects, metrics)


def skipped_metrics(spec, folder: str | None = None) -> dict:
    """The files of a folder source's listing that are not read (hidden names,
    subfolders), each logged, as the metrics that report them: skipped_files,
    skipped_bytes, skipped_paths (an empty file holds no line to account for, so it is
    not counted). {} for a load without a folder listing."""
    position = (spec.source_range or {}).get("position", {})
    if "skipped" not in position:
        return {}
    folder = folder or getattr(spec.source, "folder", "the folder")
    for relative, size, why in position["skipped"]:
        log.warning("not read: %s/%s (%s bytes): %s", folder.rstrip("/"), relative, f"{size:,}", why)
    skipped = [s for s in position["skipped"] if s[1] > 0]
    return {"skipped_files": len(skipped), "skipped_bytes": sum(s[1] for s in skipped),
            "skipped_paths": [{"path": p, "bytes": n, "why": why} for p, n, why in skipped[:MAX_LISTED]]}
