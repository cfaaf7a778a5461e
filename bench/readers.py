"""What the schema readers (twophase.spark.readers) cost, beside Spark's own trusting readers.

    .venv/bin/python -m bench.readers --lines 1000000 [--reps 2]

Makes one folder of page views (4 files, 1% bad lines) as CSV and as JSON lines, and
times, on the same files, in the same Spark session, alternating each repetition:

- baseline: Spark's own reader with the schema (`spark.read.csv` / `spark.read.json`,
  trusting the input: a bad value is a silent null), then a job's work on every column:
  per page, its views, distinct users (approximate) and first and last view;
- the reader: `read_csv` / `read_json_lines` over the folder as its source lists it (every
  line judged in Spark: a row, or rejected with its reason), in a session as the job's
  frame configures it, the same work on its rows, and what a job hands over besides: the
  metrics and the rejects the quarantine keeps (capped per reason); then what it kept is
  let go, as the frame does when a prepare ends.

Each runs once unrecorded first (`--no-warm-up` skips it). Neither stages anything: no
server is needed. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins")]

SCHEMA = {"ts": "timestamp", "url": "string", "user_id": "string"}
SPARK_DDL = "ts timestamp, url string, user_id string"


def make(folder: Path, lines: int, fmt: str, files: int = 4) -> None:
    """`lines` page views over `files` files, 1% of them with a time that is not one."""
    rng = random.Random(f"{lines} {fmt}")
    folder.mkdir(parents=True)
    outs = [open(folder / f"part-{i}.{fmt}", "w", encoding="utf-8") for i in range(files)]
    try:
        if fmt == "csv":
            for out in outs:
                out.write("ts,url,user_id\n")
        for i in range(lines):
            ts = "not a time" if rng.random() < 0.01 else f"2026-11-20T05:{rng.randrange(60):02d}:{i % 60:02d}Z"
            url, user = f"/p{rng.randrange(500)}", f"u{rng.randrange(100_000)}"
            line = f"{ts},{url},{user}" if fmt == "csv" else json.dumps({"ts": ts, "url": url, "user_id": user})
            outs[i % files].write(line + "\n")
    finally:
        for out in outs:
            out.close()


def pages(views) -> int:
    """The job's work, on every column: per page, views, users and first and last view."""
    from pyspark.sql import functions as F

    return views.groupBy("url").agg(F.count(F.lit(1)), F.approx_count_distinct("user_id"), F.min("ts"),
                                    F.max("ts")).count()


def baseline(spark, folder: Path, fmt: str) -> int:
    read = spark.read.schema(SPARK_DDL)
    return pages(read.csv(str(folder), header=True) if fmt == "csv" else read.json(str(folder)))


def accounting(spark, folder: Path, fmt: str) -> int:
    """Spark's reader accounting for its lines as Spark alone can: each line a row or, in
    the corrupt-record column, a reject (no reason); kept, counted, rejects capped, rows."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from twophase.gates import quarantine

    read = spark.read.schema(f"{SPARK_DDL}, _corrupt string").option("columnNameOfCorruptRecord", "_corrupt")
    lines = (read.csv(str(folder), header=True) if fmt == "csv" else read.json(str(folder))).withColumn(
        "file", F.input_file_name()).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        lines.groupBy(F.col("_corrupt").isNull()).count().collect()
        quarantine.capped(lines.where(F.col("_corrupt").isNotNull()).select(
            F.lit("malformed").alias("reason"), F.col("file").alias("source"), F.col("_corrupt").alias("content")))
        return pages(lines.where(F.col("_corrupt").isNull()))
    finally:
        lines.unpersist()


def reader(spark, folder: Path, fmt: str) -> int:
    from twophase.gates import quarantine
    from twophase.sources.files import FilesSource
    from twophase.spark.job import configure
    from twophase.spark.readers import read_csv, read_json_lines

    configure(spark)
    source = FilesSource(f"file://{folder}", "interval")  # listed as a begin lists it
    spec = types.SimpleNamespace(load_id="bench", source=source, source_range=source.open(None).fix([]).to_json())
    read = (read_csv if fmt == "csv" else read_json_lines)(spark, spec, SCHEMA)
    try:
        quarantine.capped(read.rejects)
        return pages(read.rows)
    finally:
        spark.catalog.clearCache()


CONTENDERS = {"baseline": baseline, "accounting": accounting, "reader": reader}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--no-warm-up", action="store_true")
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    rows = ["| format | lines | Spark's reader, trusting the input | Spark's reader, accounting (corrupt-record column)"
            " | the schema reader, every line judged | of trusting's speed | of accounting's speed |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="bench-readers-") as tmp:
        spark = (SparkSession.builder.master("local[*]").appName("bench readers")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        for fmt in ("csv", "jsonl"):
            folder = Path(tmp) / fmt
            make(folder, args.lines, fmt)
            times: dict[str, list[float]] = {"baseline": [], "accounting": [], "reader": []}
            for rep in range(0 if args.no_warm_up else -1, args.reps):
                for name in times if rep % 2 else reversed(times):  # alternating which goes first
                    started = time.perf_counter()
                    pages = CONTENDERS[name](spark, folder, fmt)
                    seconds = time.perf_counter() - started
                    if rep >= 0:
                        times[name].append(seconds)
                    print(f"  {fmt} {name} {f'rep {rep + 1}' if rep >= 0 else 'warm-up'}: {seconds:.1f} s, "
                          f"{pages} pages", file=sys.stderr, flush=True)
            base, counted, ours = (statistics.median(times[name]) for name in CONTENDERS)
            rows.append(f"| {fmt} | {args.lines:,} | " + " | ".join(
                f"{s:.1f} s ({args.lines / s:,.0f} lines/s)" for s in (base, counted, ours))
                + f" | {base / ours:.0%} | {counted / ours:.0%} |")
        spark.stop()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
