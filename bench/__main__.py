"""Benchmark: the atomic load side by side with Spark's own writers and the machine's limits.

    bench/run                      sizes 100k, 1M, 5M; 3 repetitions; shapes narrow and wide
    bench/run --quick              smoke run: 5k and 20k rows, 1 repetition
    bench/run --sizes 1000000 --reps 5 --shapes narrow

(bench/run installs, brings the stack up and sets its environment, then runs
`python -m bench`.) For each shape and size, the same rows go, in each repetition, to:
the input scan, the peers (Spark JDBC default and tuned, Spark Kafka writer), the atomic
load (begin, prepare, vote, commit), the limits (COPY, Kafka's producer tool), and the
Iceberg participant's staging beside pyarrow writing the same Parquet files alone. The
report goes to bench/results/<timestamp>.md and bench/results/latest.md, the raw figures
to bench/results/<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from . import atomic, iceberg, limits, machine, memory, peers, report, scratch, session, staging, targets
from . import results as R
from .data import SHAPES, Dataset
from .results import Run

RESULTS = Path(__file__).with_name("results")
WARM_UP_ROWS = 2000


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", help="rows per dataset, comma-separated (default 100000,1000000,5000000)")
    parser.add_argument("--reps", type=int, help="repetitions of each contender (default 3)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="narrow, wide or both (default both)")
    parser.add_argument("--partitions", type=int, default=4, help="Spark partitions of the data (default 4)")
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory (default 2g)")
    parser.add_argument("--driver-java-options", default=session.JAVA_OPTIONS,
                        help=f"spark.driver.extraJavaOptions (default {session.JAVA_OPTIONS}: a heap sized from "
                             "what is live; bench/session.py)")
    parser.add_argument("--live-heap", action="store_true",
                        help="also measure the driver JVM's live heap: a full GC every "
                             f"{memory.LIVE_EVERY_S:g} s of the scan and the "
                             "atomic load and after each (bench/memory.py; the collections slow those two and not "
                             "the other peers: take times from a run without it)")
    parser.add_argument("--no-limits", action="store_true", help="skip COPY and the producer tool")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the staging pass's breakdown")
    parser.add_argument("--no-iceberg", action="store_true",
                        help="skip the Iceberg figures (staging beside pyarrow alone, commit)")
    parser.add_argument("--quick", action="store_true", help="smoke run: sizes 5000,20000, 1 repetition")
    parser.add_argument("--no-warm-up", action="store_true",
                        help=f"skip each shape's warm-up repetition on {WARM_UP_ROWS:,} rows (not recorded): the "
                             "first recorded repetition then pays the JVM's warm-up (the tests' toy run)")
    parser.add_argument("--note", default="", help="a line for the report (e.g. what else ran on the machine)")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="the folder of the reports (default bench/results; the tests' toy runs use their own)")
    parser.add_argument("--render", metavar="JSON", help="measure nothing: write the report of an earlier run's "
                        "bench/results/<timestamp>.json again (e.g. after editing bench/findings.md)")
    args = parser.parse_args(argv)
    args.sizes = [int(x) for x in (args.sizes or ("5000,20000" if args.quick else "100000,1000000,5000000")).split(",")]
    args.reps = args.reps or (1 if args.quick else 3)
    args.shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in args.shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shapes {unknown}; choose from {SHAPES}")
    return args


def one_rep(data: Dataset, conns, log, sampler: memory.Sampler, with_limits: bool,
            with_breakdown: bool, with_iceberg: bool) -> tuple[dict, dict, dict]:
    """Every contender once on data: (seconds by key, peak RSS by group, extra figures)."""
    seconds, rss, extra = {}, {}, {}
    spark_contenders = [(R.SCAN, lambda: peers.scan(data)),
                        (R.JDBC_DEFAULT, lambda: peers.jdbc(data, conns.pg_dsn, tuned=False)),
                        (R.JDBC_TUNED, lambda: peers.jdbc(data, conns.pg_dsn, tuned=True)),
                        (R.KAFKA_WRITER, lambda: peers.kafka(data, conns.kafka_bootstrap))]
    for key, run in spark_contenders:
        with sampler.window() as rss[key]:
            seconds[key] = run()
    with sampler.window() as rss["atomic"]:
        phases = atomic.load(data, conns, log)
    seconds.update({R.atomic(k): v for k, v in phases.items()})
    seconds.update({R.attach(k): v for k, v in atomic.load(data, conns, log, publish="attach").items()})
    if with_breakdown:
        parts = staging.measure(data, conns.pg_dsn, conns.kafka_bootstrap)
        seconds.update({R.breakdown(k): v for k, v in parts.items()})
    if with_iceberg:
        seconds.update({R.iceberg(k): v for k, v in iceberg.measure(data).items()})
    if with_limits:
        seconds[R.COPY] = limits.copy(data, conns.pg_dsn)
        extra["producer_tool"] = limits.producer_tool(data, conns.kafka_bootstrap)
        seconds[R.PRODUCER_TOOL] = extra["producer_tool"]["seconds"]
    return seconds, rss, extra


def _progress(run: Run, rep: int, reps: int) -> None:
    s = run.reps[-1]["seconds"]
    parts = [f"{k.split('.', 1)[-1]} {s[k]:.2f}s" for k in
             (R.JDBC_DEFAULT, R.JDBC_TUNED, R.KAFKA_WRITER, R.atomic("load"), R.attach("load"), R.COPY,
              R.PRODUCER_TOOL) if k in s]
    if R.iceberg("staging") in s:
        alone, staged, commit = (s[R.iceberg(k)] for k in ("pyarrow_alone", "staging", "commit"))
        parts.append(f"iceberg: pyarrow alone {alone:.2f}s, staging {staged:.2f}s ({staged / alone:.2f}x), "
                     f"commit {commit:.2f}s")
    print(f"bench: {run.shape} {run.rows:,} rows, rep {rep}/{reps}: " + ", ".join(parts), flush=True)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.render:
        render_again(Path(args.render), args.results)
        return
    from twophase.log import PostgresLog
    from twophase.connections import Connections

    conns = Connections.from_env()
    started, clock = datetime.now(timezone.utc), time.monotonic()
    stamp = started.strftime("%Y%m%d-%H%M%S")
    meta = {"started": started.strftime("%Y-%m-%d %H:%M UTC"), "reps": args.reps, "partitions": args.partitions,
            "command": "bench/run " + " ".join(argv) if argv else "bench/run", "note": args.note,
            "load_start": machine.load_average()}
    spark = session.start(args.driver_memory, args.driver_java_options)
    sampler = memory.Sampler(live_heap=memory.LiveHeap(spark) if args.live_heap else None)
    scratch.sweep(conns.pg_dsn, conns.kafka_bootstrap)
    if not args.no_iceberg:
        iceberg.sweep()
    log = PostgresLog(conns.pg_dsn)
    log.ensure_schema()
    meta["machine"] = machine.describe(spark, conns.pg_dsn)
    args.results.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    try:
        for shape in args.shapes:
            if not args.no_warm_up:
                warm = Dataset.load(spark, shape, WARM_UP_ROWS, args.partitions)
                print(f"bench: {shape}: warm-up on {WARM_UP_ROWS:,} rows (not recorded)", flush=True)
                one_rep(warm, conns, log, sampler, with_limits=False, with_breakdown=not args.no_breakdown,
                        with_iceberg=not args.no_iceberg)
                warm.drop()
            for rows in args.sizes:
                data = Dataset.load(spark, shape, rows, args.partitions)
                if not args.no_limits:
                    data.csv_parts()  # written once, before any clock
                run = Run(shape, rows, args.partitions, data.avg_record_bytes)
                for rep in range(1, args.reps + 1):
                    run.add(*one_rep(data, conns, log, sampler, with_limits=not args.no_limits,
                                     with_breakdown=not args.no_breakdown, with_iceberg=not args.no_iceberg))
                    _progress(run, rep, args.reps)
                data.drop()
                runs.append(run)
                _write(args.results, stamp, meta, runs, clock, final=False)
    finally:
        sampler.stop()
        spark.stop()
    path = _write(args.results, stamp, meta, runs, clock, final=True)
    print(f"bench: report written to {path} and {args.results / 'latest.md'}", flush=True)


def render_again(raw: Path, results: Path) -> None:
    saved = json.loads(raw.read_text())
    runs = [Run(**r) for r in saved["runs"]]
    text = _render(saved["meta"], runs)
    raw.with_suffix(".md").write_text(text)
    (results / "latest.md").write_text(text)
    print(f"bench: report of {raw.name} written again to {raw.with_suffix('.md')} and {results / 'latest.md'}")


def _render(meta: dict, runs: list[Run]) -> str:
    checks = [c for shape in dict.fromkeys(r.shape for r in runs)
              for c in targets.check(shape, [r for r in runs if r.shape == shape])]
    return report.render(meta, runs, checks)


def _write(results: Path, stamp: str, meta: dict, runs: list[Run], clock: float, final: bool) -> Path:
    meta = {**meta, "elapsed_min": (time.monotonic() - clock) / 60, "load_end": machine.load_average()}
    text = _render(meta, runs)
    path = results / f"{stamp}.md"
    path.write_text(text)
    (results / f"{stamp}.json").write_text(json.dumps({"meta": meta, "runs": [r.to_json() for r in runs]}, indent=1))
    if final:
        (results / "latest.md").write_text(text)
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
