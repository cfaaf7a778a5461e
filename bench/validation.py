"""What the example job's line-by-line validation costs, beside Spark's own JSON reader.

    .venv/bin/python -m bench.validation --lines 1000000 [--reps 2]

Makes one sample day (orders_sample, 1% bad lines) and times, on the same files, in the
same Spark session, alternating each repetition:

- baseline: Spark's own reader of the same lines (`spark.read.text` + `from_json` with the
  order schema), grouped into the same per-customer totals: what a job that trusts its
  input pays;
- the job: the day folder's listing (its source's, as at begin) and `orders_daily_totals.build`
  (every line judged: order_sql's fast path in Spark's JVM, order_rules in Python for the lines
  it leaves; rejects written, duplicates, totals), its result counted, then what it kept
  dropped.

Before the first repetition, each runs once unrecorded (`--no-warm-up` skips it): the JVM's
warm-up and the start of Spark's Python workers are then paid by neither contender's
first repetition. Neither stages anything: the servers are not needed. Prints a Markdown
table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import types
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "spark_jobs"), str(ROOT / "plugins")]


def baseline(spark, folder: str) -> int:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("order_id", T.StringType()), T.StructField("customer_id", T.StringType()),
                           T.StructField("amount", T.DoubleType()), T.StructField("ordered_at", T.TimestampType())])
    orders = spark.read.text(folder).select(F.from_json("value", schema).alias("o")).select("o.*")
    return (orders.where(F.col("customer_id").isNotNull()).groupBy("customer_id")
            .agg(F.count(F.lit(1)), F.sum("amount"), F.min("ordered_at"), F.max("ordered_at")).count())


def job(spark, folder: str, day: date, rejects: str) -> int:
    import orders_daily_totals
    from twophase.sources.files import FilesSource
    from twophase.spark.job import configure

    configure(spark)  # the session as the job's frame sets it

    source = FilesSource(f"file://{folder}", "interval")  # the day's folder, listed as the DAG's begin lists it
    spec = types.SimpleNamespace(load_id="bench", input={"date": day.isoformat(), "rejects": rejects},
                                 source=source, source_range=source.open(None).fix([]).to_json())
    frames = orders_daily_totals.build(spark, spec).df  # {frame name: DataFrame}; "" is the per-customer one
    try:
        return frames[""].count()
    finally:
        spark.catalog.clearCache()  # what the job kept: a prepare's session ends with it


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--no-warm-up", action="store_true",
                        help="skip the unrecorded first run of each: the first repetition then pays the warm-up")
    args = parser.parse_args(argv)

    from orders_sample.generate import generate
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv's pyarrow
    day = date(2041, 1, 1)
    with tempfile.TemporaryDirectory(prefix="bench-validation-") as tmp:
        made = generate(Path(tmp) / "landing", day, args.lines, bad_share=0.01)
        spark = (SparkSession.builder.master("local[*]").appName("bench validation")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        times: dict[str, list[float]] = {"baseline": [], "job": []}
        for rep in range(0 if args.no_warm_up else -1, args.reps):
            for name in times if rep % 2 else reversed(times):  # alternating which goes first
                started = time.perf_counter()
                rows = (baseline(spark, str(made.folder)) if name == "baseline"
                        else job(spark, str(made.folder), day, f"{tmp}/rejects-{rep}"))
                seconds = time.perf_counter() - started
                if rep >= 0:
                    times[name].append(seconds)
                print(f"  {name} {f'rep {rep + 1}' if rep >= 0 else 'warm-up'}: {seconds:.1f} s, {rows} rows",
                      file=sys.stderr, flush=True)
        spark.stop()
    base, ours = statistics.median(times["baseline"]), statistics.median(times["job"])
    print(f"| lines | Spark's reader, trusting the input | the job, every line validated | ratio |\n"
          f"|---:|---:|---:|---:|\n"
          f"| {args.lines:,} | {base:.1f} s ({args.lines / base:,.0f} lines/s) | {ours:.1f} s "
          f"({args.lines / ours:,.0f} lines/s) | {ours / base:.2f}x |")


if __name__ == "__main__":
    main()
