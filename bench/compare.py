"""Two releases' atomic loads, side by side in one run: is a change as fast as before it?

    bench/compare d4e6764                     d4e6764 (baseline) against HEAD: 1M narrow rows, 3 reps
    bench/compare d4e6764 --against HEAD --rows 1000000 --reps 5 --shape wide

Each release is extracted (git archive) to .stack/bench/trees/<commit>. Every repetition
runs, from each tree in turn, that release's own bench on the same rows:

    python -m bench --sizes <rows> --shapes <shape> --reps 1 --no-limits --no-breakdown [--no-iceberg]

so each release's atomic load is timed by the bench written for its API, the same way:
the same stack, a fresh Spark session, the same warm-up, the same generated rows. The
order alternates between repetitions (baseline first, then the other first), so a drift
of the machine weighs on both. Spark's own writers (the same code in both trees) run in
each too: their figures side by side show whether the machine stayed the same.

The baseline keeps its transaction log in the stack's database twophase_baseline (a
release cannot read a log that a newer one has migrated); the other uses the stack's.
The report goes to bench/results/compare-<stamp>.md and bench/results/compare-latest.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from . import machine
from . import results as R
from .data import ROOT, SHAPES

TREES = ROOT / ".stack" / "bench" / "trees"
RESULTS = Path(__file__).with_name("results")
BASELINE_DB = "twophase_baseline"  # created by the local stack (scripts/localstack/settings.py)
SHOWN = [(R.atomic("load"), "atomic load (begin to commit)"), (R.atomic("begin"), "  begin"),
         (R.atomic("prepare"), "  prepare"), (R.atomic("vote"), "  vote"), (R.atomic("commit"), "  commit"),
         (R.SCAN, "scan (same code in both)"), (R.JDBC_TUNED, "Spark JDBC tuned (same code)"),
         (R.KAFKA_WRITER, "Spark Kafka writer (same code)")]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baseline", help="the release measured first (a commit, tag or branch)")
    parser.add_argument("--against", default="HEAD", help="the release compared with it (default HEAD)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per load (default 1000000)")
    parser.add_argument("--shape", default="narrow", choices=SHAPES, help="narrow (default) or wide")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each release (default 3)")
    parser.add_argument("--note", default="", help="a line for the report (e.g. what else ran on the machine)")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="the folder of the report (default bench/results; the tests' toy runs use their own)")
    args = parser.parse_args(argv)
    if args.reps < 1 or args.rows < 1:
        parser.error("--reps and --rows must be at least 1")
    return args


def commit_of(rev: str) -> str:
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench/compare: {rev!r} is not a commit of this repository")
    return proc.stdout.strip()


def tree_of(commit: str) -> Path:
    """The release's files at .stack/bench/trees/<commit> (extracted once), sharing the
    bench's jars and data directories with this checkout."""
    tree = TREES / commit[:12]
    if not (tree / "bench" / "__main__.py").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    if not (tree / "bench" / "__main__.py").exists():
        raise SystemExit(f"bench/compare: commit {commit[:12]} has no bench to run")
    for shared in (Path(".stack/bench/jars"), Path(".stack/bench-data")):
        (ROOT / shared).mkdir(parents=True, exist_ok=True)
        link = tree / shared
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(ROOT / shared)
    return tree


def baseline_dsn(dsn: str) -> str:
    """The stack's DSN with the baseline's database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{BASELINE_DB}"))


def run_release(tree: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, float]:
    """One repetition of the release in `tree`: its bench's seconds per contender."""
    before = set((tree / "bench" / "results").glob("*.json"))
    cmd = [sys.executable, "-m", "bench", "--sizes", str(args.rows), "--shapes", args.shape, "--reps", "1",
           "--no-limits", "--no-breakdown", "--note", "bench/compare"]
    if "--no-iceberg" in (tree / "bench" / "__main__.py").read_text():  # a release that has the Iceberg figures
        cmd.append("--no-iceberg")
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"bench/compare: the bench of {tree.name} failed (exit {proc.returncode}):\n{tail}")
    written = sorted(set((tree / "bench" / "results").glob("*.json")) - before)
    if not written:
        raise SystemExit(f"bench/compare: the bench of {tree.name} wrote no results")
    saved = json.loads(written[-1].read_text())
    return saved["runs"][0]["reps"][0]["seconds"]


def release_env(tree: Path, baseline: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "plugins")}
    if baseline:
        env["TWOPHASE_PG_DSN"] = baseline_dsn(os.environ["TWOPHASE_PG_DSN"])
    return env


def render(meta: dict, labels: tuple[str, str], reps: dict[str, list[dict]]) -> str:
    base, other = labels
    lines = [f"# bench/compare: {base} (baseline) and {other}", "",
             f"- started {meta['started']}, {meta['elapsed_min']:.1f} min; command `{meta['command']}`",
             f"- {meta['rows']:,} {meta['shape']} rows, {meta['reps']} repetitions of each release, "
             "alternating which runs first",
             f"- machine: {meta['machine']}; load average {meta['load_start']} at the start, "
             f"{meta['load_end']} at the end"]
    if meta["note"]:
        lines.append(f"- note: {meta['note']}")
    lines += ["", f"| seconds (median of {meta['reps']}) | {base} | {other} | change | {base} reps | {other} reps |",
              "|---|---:|---:|---:|---|---|"]
    for key, title in SHOWN:
        a = [r[key] for r in reps[base] if key in r]
        b = [r[key] for r in reps[other] if key in r]
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        change = f"{(mb / ma - 1) * 100:+.1f}%" if ma else "n/a"
        lines.append(f"| {title} | {ma:.2f} | {mb:.2f} | {change} | {' '.join(f'{x:.2f}' for x in a)} "
                     f"| {' '.join(f'{x:.2f}' for x in b)} |")
    lines += ["", "Each release's figures come from its own bench (`python -m bench`, one repetition per "
              "process); see bench/README.md for what each contender times."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    commits = {"baseline": commit_of(args.baseline), "against": commit_of(args.against)}
    trees = {role: tree_of(c) for role, c in commits.items()}
    labels = (f"{args.baseline} ({commits['baseline'][:7]})", f"{args.against} ({commits['against'][:7]})")
    started, clock = datetime.now(timezone.utc), time.monotonic()
    meta = {"started": started.strftime("%Y-%m-%d %H:%M UTC"), "rows": args.rows, "shape": args.shape,
            "reps": args.reps, "note": args.note, "command": "bench/compare " + " ".join(argv),
            "machine": machine.describe_host(), "load_start": machine.load_average()}
    reps: dict[str, list[dict]] = {label: [] for label in labels}
    for rep in range(1, args.reps + 1):
        order = ["baseline", "against"] if rep % 2 else ["against", "baseline"]
        for role in order:
            label = labels[0] if role == "baseline" else labels[1]
            seconds = run_release(trees[role], args, release_env(trees[role], role == "baseline"))
            reps[label].append(seconds)
            print(f"bench/compare: rep {rep}/{args.reps}, {label}: atomic load {seconds[R.atomic('load')]:.2f} s, "
                  f"Spark JDBC tuned {seconds[R.JDBC_TUNED]:.2f} s", flush=True)
    meta.update(elapsed_min=(time.monotonic() - clock) / 60, load_end=machine.load_average())
    text = render(meta, labels, reps)
    stamp, results = started.strftime("%Y%m%d-%H%M%S"), args.results
    results.mkdir(parents=True, exist_ok=True)
    (results / f"compare-{stamp}.json").write_text(json.dumps({"meta": meta, "reps": reps}, indent=1))
    (results / f"compare-{stamp}.md").write_text(text)
    (results / "compare-latest.md").write_text(text)
    print(text)
    print(f"bench/compare: report written to {results / f'compare-{stamp}.md'} and {results / 'compare-latest.md'}")


if __name__ == "__main__":
    main(sys.argv[1:])
