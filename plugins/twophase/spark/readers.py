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
    malformed         not a JSON object (JSON lines)
    too_many_fields   a CSV line with more fields than the schema has columns (a separator
                      at its end makes one more, empty)
    missing_<column>  the column is absent, empty or null
    bad_<column>      its value is not of the column's type (detail: the value and type)
  the first of these that applies, in this order and the schema's column order;
- blank (only white space) and, for CSV with `header`, a line that is the header itself
  (the schema's names joined by the separator): counted, not rejected.

The files the source listed but does not read (hidden names, subfolders) are in the
metrics too (skipped_files, skipped_bytes, skipped_paths), for the vote's gate. Nothing is
parsed in Python: a line crosses to Python only in `rejects`, capped by the quarantine.

Each line is split into its fields in Java (LineFields.java, compiled on the driver:
twophase.spark.java_functions) where its form leaves no doubt about what Spark's own
parser (from_csv, from_json) would make of it, else by that parser, so the fields are
Spark's either way (a driver without a JDK parses every line with Spark's). Each line is
parsed and judged once, when the reader counts the verdicts; what the rows and the
rejects need of it is kept (persisted: a row's typed values, a rejected line's reason,
detail, file and text) until the prepare ends (twophase.spark.job.prepare lets it go), so
`rows` and `rejects` read the cache, not the files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .. import schema as schemas
from ..errors import SpecError
from . import java_functions
from .job import read_source

log = logging.getLogger("twophase.readers")
JAVA_SOURCE = Path(__file__).with_name("jvm") / "LineFields.java"  # the fast path: a line's fields in Java
CSV_FIELDS, JSON_FIELDS = "twophase_csv_fields", "twophase_json_fields"
JAVA_FUNCTIONS = {CSV_FIELDS: ("twophase.LineFields$Csv", "array<string>"),
                  JSON_FIELDS: ("twophase.LineFields$Json", "array<string>")}
MAX_LISTED = 100  # skipped_paths lists at most this many files (all are counted)
_CORRUPT, _JAVA, _PART = "_twophase_corrupt", "_twophase_java", "_twophase_part"
_VALUE, _FILE, _MALFORMED, _TOO_MANY = "_twophase_value", "_twophase_file", "_twophase_malformed", "_twophase_too_many"
_VERDICT, _DETAIL = "_twophase_verdict", "_twophase_detail"
BLANK, HEADER = -1, -2  # a line's verdict when it is blank or the header (0: a row; n > 0: the n-th check failed)


@dataclass
class Lines:
    """What a reader read: `rows` (a DataFrame of the schema's columns), `rejects` (reason,
    source, detail, content: Output's rejects), and the metrics of the job's contract."""

    rows: object
    rejects: object
    metrics: dict


def read_csv(spark, spec, schema: dict, *, header: bool = True, sep: str = ",", optional: tuple = (),
             java: bool = True) -> Lines:
    """The load's CSV lines (no line breaks inside fields) as rows of `schema` ({column:
    Spark type}, in the files' column order); see the module doc. `java=False` reads
    every line with from_csv (the same verdicts, slower)."""
    from pyspark.sql import functions as F

    declared = schemas.check(schema, "read_csv schema")
    raw = ", ".join(f"`{c}` string" for c in [*declared, _CORRUPT])
    options = {"sep": sep, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    parsed = _parsed(spark, F.from_csv(F.col("value"), raw, options), declared,
                     (CSV_FIELDS, F.lit(sep), F.lit(len(declared))) if java and len(sep) == 1 else None)
    # A line without exactly as many fields as columns is corrupt for from_csv, which keeps
    # the first ones: with the last column present it had more; without, it had fewer
    # unless its last column was empty and more followed, which counting its separators
    # outside quotes (followed by an even number of quotes) tells.
    outside_quotes = f'\\Q{sep}\\E(?=(?:[^"]*"[^"]*")*[^"]*\\z)'
    too_many = F.col(f"parsed.{_CORRUPT}").isNotNull() & (
        F.col(f"parsed.`{list(declared)[-1]}`").isNotNull()
        | (F.size(F.split(F.col("value"), outside_quotes, -1)) > len(declared)))
    header_line = sep.join(declared) if header else None
    return _judge(spark, spec, declared, parsed, F.lit(False), optional, header_line, too_many=too_many)


def read_json_lines(spark, spec, schema: dict, *, optional: tuple = (), java: bool = True) -> Lines:
    """The load's JSON lines (one object per line; keys the schema does not name are
    ignored) as rows of `schema` ({column: Spark type}); see the module doc. `java=False`
    reads every line with from_json (the same verdicts, slower)."""
    from pyspark.sql import functions as F

    declared = schemas.check(schema, "read_json_lines schema")
    raw = ", ".join(f"`{c}` string" for c in [*declared, _CORRUPT])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    parsed = _parsed(spark, F.from_json(F.col("value"), raw, options), declared,
                     (JSON_FIELDS, F.lit("\0".join(declared))) if java else None)
    malformed = F.col("parsed").isNull() | F.col(f"parsed.{_CORRUPT}").isNotNull()
    return _judge(spark, spec, declared, parsed, malformed, optional, None, too_many=F.lit(False))


def _in_java(spark) -> bool:
    return java_functions.register(spark, JAVA_SOURCE, JAVA_FUNCTIONS,
                                   "every line is parsed by Spark's from_csv or from_json (slower, same verdicts)")


def _parsed(spark, spark_parse, declared: dict, java: tuple | None):
    """How a line's `parsed` struct (the schema's columns as text, and _CORRUPT) is made:
    `spark_parse` alone, or, given `java` (the function's name and its arguments after the
    line's bytes) and a session where it is registered, the Java function's array of them
    (null where it leaves the line to Spark) and `spark_parse` for the lines it leaves. The
    function runs in a step of its own, once per line."""
    from pyspark.sql import functions as F

    if java is None or not _in_java(spark):
        return lambda frame: frame.withColumn("parsed", spark_parse)
    name, *args = java
    found = F.col(_JAVA)
    struct = F.struct(*[found[i].alias(c) for i, c in enumerate(declared)], found[len(declared)].alias(_CORRUPT))

    def parsed(frame):
        split = barrier(frame.withColumn(_JAVA, F.call_function(name, F.col("value").cast("binary"), *args)))
        return split.withColumn("parsed", F.when(found.isNotNull(), struct).otherwise(spark_parse)).drop(_JAVA)

    return parsed


def _judge(spark, spec, declared: dict, parsed, malformed, optional: tuple, header_line: str | None,
           too_many) -> Lines:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    unknown = [c for c in optional if c not in declared]
    if unknown:
        raise SpecError(f"optional names {unknown}, which are not columns of the schema")
    columns = list(declared)
    text = {c: F.col(f"parsed.`{c}`") for c in columns}
    # Three steps, each computing what it names once per line: a barrier (a filter naming
    # spark_partition_id(), which is not deterministic) keeps Spark from inlining a step
    # into the next, where the parse and each cast would be copied into every check that
    # reads them. Internal names (_twophase_*) leave every name free for the schema.
    lines = barrier(parsed(read_source(spark, spec).select("value", "file")).select(
        F.col("value").alias(_VALUE), F.col("file").alias(_FILE), "parsed",
        malformed.alias(_MALFORMED), too_many.alias(_TOO_MANY),
        *[(text[c].isNotNull() & (F.trim(text[c]) != "")).alias(_has(i)) for i, c in enumerate(columns)],
        *[F.expr(f"try_cast(parsed.`{c}` as {t})").alias(_typed(i)) for i, (c, t) in enumerate(declared.items())]))
    has = {c: F.col(_has(i)) for i, c in enumerate(columns)}
    typed = {c: F.col(_typed(i)) for i, c in enumerate(columns)}
    checks = [(F.col(_MALFORMED), "malformed", F.lit("not one record of the format")),
              (F.col(_TOO_MANY), "too_many_fields", F.lit(f"more than {len(columns)} fields"))]
    checks += [(~has[c], f"missing_{c}", F.lit(f"{c} is missing")) for c in columns if c not in optional]
    checks += [(has[c] & typed[c].isNull(), f"bad_{c}",
                F.format_string(f"{c} %s is not a {t}", F.substring(text[c], 1, 100)))
               for c, t in declared.items() if t != "string"]  # any text is a string
    # A line's verdict as one number: the first check that fails (1, 2, ...), 0 a row,
    # BLANK or HEADER.
    line = F.trim(F.col(_VALUE))
    verdict = F.when(line == "", BLANK)
    if header_line is not None:
        verdict = verdict.when(line == header_line, HEADER)
    for number, (failed, _, _) in enumerate(checks, 1):
        verdict = verdict.when(failed, number)
    lines = barrier(lines.select("*", verdict.otherwise(0).alias(_VERDICT)))
    verdict = F.col(_VERDICT)
    detail = F.lit(None).cast("string")
    for number, (_, _, said) in reversed(list(enumerate(checks, 1))):
        detail = F.when(verdict == number, said).otherwise(detail)
    # Kept: a row's typed values, a rejected line's detail, file and text; the counts' pass
    # fills the cache, the rows and the rejects read it.
    rejected = verdict > 0
    judged = lines.select(*[F.when(verdict == 0, typed[c]).alias(_typed(i)) for i, c in enumerate(columns)],
                          verdict, detail.alias(_DETAIL), F.when(rejected, F.col(_FILE)).alias(_FILE),
                          F.when(rejected, F.col(_VALUE)).alias(_VALUE)).persist(StorageLevel.MEMORY_AND_DISK)
    reasons = [why for _, why, _ in checks]
    counts = dict(judged.groupBy(_VERDICT).count().collect())
    by_reason = {reasons[n - 1]: counts[n] for n in sorted(counts) if n > 0}
    metrics = {"input_lines": sum(counts.values()), "rejected_lines": sum(by_reason.values()),
               "rejected_by_reason": dict(sorted(by_reason.items())), "blank_lines": counts.get(BLANK, 0),
               **({"header_lines": counts.get(HEADER, 0)} if header_line is not None else {}),
               **skipped_metrics(spec)}
    log.info("read %d lines: %d rows, %d rejected %s, %d blank", metrics["input_lines"], counts.get(0, 0),
             metrics["rejected_lines"], metrics["rejected_by_reason"], metrics["blank_lines"])
    rows = judged.where(verdict == 0).select(*[F.col(_typed(i)).alias(c) for i, c in enumerate(columns)])
    rejects = judged.where(rejected).select(
        F.element_at(F.array(*map(F.lit, reasons)), verdict).alias("reason"), F.col(_FILE).alias("source"),
        F.col(_DETAIL).alias("detail"), F.col(_VALUE).alias("content"))
    return Lines(rows, rejects, metrics)


def barrier(frame):
    """`frame`, computed as it stands before what comes after it: Spark does not inline
    the expressions of its columns into what reads them (see _judge)."""
    from pyspark.sql import functions as F

    return frame.withColumn(_PART, F.spark_partition_id()).where(F.col(_PART) >= 0).drop(_PART)


def _has(i: int) -> str:
    return f"_twophase_has_{i}"


def _typed(i: int) -> str:
    return f"_twophase_typed_{i}"


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
