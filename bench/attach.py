"""A day's rows published by ATTACH PARTITION beside the same rows published by INSERT ...
SELECT, into the same kind of table, in one run (issue 28, docs/adr/0013).

    python -m bench.attach [--rows 1000000] [--reps 3] [--shape narrow]

Needs the stack: scripts/stack up; eval "$(scripts/stack env)". Each repetition makes,
for each way, a fresh table partitioned by day (bench/data.py's rows, all of one day) and
runs two loads of that day through the core (begin, prepare, vote, commit; one Postgres
target, no topic): an append, then a replace of it. "insert" publishes as every table does
(the day's partition made empty beforehand, since an insert needs one); "attach" makes the
staging table the day's partition. The ways alternate which goes first.

Per way and mode, medians of:
  prepare   the staging pass (COPY into staging: unlogged for insert, logged for attach);
  vote      ready: the promotion (insert: DELETE of the replaced rows, INSERT ... SELECT;
            attach: DETACH and DROP of the replaced partition, ATTACH) and PREPARE;
  commit    COMMIT PREPARED, and dropping what staging is left;
  load      begin to COMMITTED;
and whether a reader of the table (SELECT, lock_timeout 100 ms) is blocked while the load
holds its prepared transaction. Medians go to stdout as a Markdown table.
"""

from __future__ import annotations

import statistics
import time

import psycopg2

from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spec import LoadSpec

from . import scratch, session
from .data import DAY, DAY_INTERVAL, Dataset

WAYS = ("insert", "attach")
MODES = ("append", "replace")
FIGURES = ("prepare", "vote", "commit", "load")


def _table(dsn: str, shape: str, way: str) -> str:
    """A fresh table of the shape, partitioned by day; insert's with the day's partition."""
    table = scratch.create_table(dsn, shape, scratch.new_name(), partitioned=True)
    if way == "insert":
        scratch.sql(dsn, f"create table {table}_day partition of {table} for values from (%s) to (%s)",
                    args=(DAY_INTERVAL[0][:10], DAY_INTERVAL[1][:10]))
    return table


def _reader_blocked(dsn: str, table: str) -> bool:
    """Whether a reader's SELECT of the table waits on a lock (given up after 100 ms)."""
    conn = psycopg2.connect(dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("set lock_timeout = '100ms'")
            try:
                cur.execute(f"select count(*) from {table}")
                return False
            except psycopg2.errors.LockNotAvailable:
                return True
    finally:
        conn.close()


def load(data: Dataset, conns: Connections, log: PostgresLog, table: str, way: str, mode: str) -> dict:
    """One load of `data` into `table`; seconds per FIGURES, and `blocked`."""
    name = scratch.new_name()
    spec = LoadSpec(load_id=load_id_for(scratch.PIPELINE, name), pipeline=scratch.PIPELINE, run_id=name,
                    targets=(PostgresTarget(table, mode, {"day": DAY} if way == "insert" and mode == "replace" else {},
                                            publish=way),), data_interval=DAY_INTERVAL)
    started = time.perf_counter()
    coordinator.begin(log, spec, conns)
    coordinator.prepare(log, conns, spec.load_id, data.df)
    prepared = time.perf_counter()
    decided = coordinator.vote(log, conns, spec.load_id)
    voted = time.perf_counter()
    if decided.state != State.COMMITTING:
        raise RuntimeError(f"the bench load was not decided COMMIT: {decided.state.value} {decided.reason}")
    blocked = _reader_blocked(conns.pg_dsn, table)
    mark = time.perf_counter()
    coordinator.commit(log, conns, spec.load_id)
    ended = time.perf_counter()
    got = scratch.count_rows(conns.pg_dsn, table)
    assert got == data.rows, f"the {way} {mode} load left {got} rows of {data.rows}"
    return {"load_id": spec.load_id, "prepare": prepared - started, "vote": voted - prepared, "commit": ended - mark,
            "load": ended - started - (mark - voted), "blocked": blocked}


def report(rows: int, figures: dict) -> str:
    lines = [f"{rows:,} rows of one day, {len(figures[WAYS[0], MODES[0]])} repetitions (median seconds)", "",
             "| way | mode | " + " | ".join(FIGURES) + " | reader blocked while prepared |",
             "|---|---|" + "---:|" * len(FIGURES) + "---|"]
    for (way, mode), reps in figures.items():
        blocked = sorted({"yes" if r["blocked"] else "no" for r in reps})
        lines.append(f"| {way} | {mode} | " + " | ".join(f"{statistics.median(r[f] for r in reps):.3f}"
                                                          for f in FIGURES) + f" | {', '.join(blocked)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = session.load_options("python -m bench.attach", __doc__, argv)
    figures: dict = {(way, mode): [] for way in WAYS for mode in MODES}
    with session.on_stack(args) as (conns, log, data):
        for rep in range(args.reps):
            for way in WAYS if rep % 2 == 0 else reversed(WAYS):  # alternate which goes first
                table, done = _table(conns.pg_dsn, args.shape, way), []
                try:
                    for mode in MODES:
                        figures[way, mode].append(load(data, conns, log, table, way, mode))
                        done.append(figures[way, mode][-1]["load_id"])
                        print(f"bench.attach: repetition {rep + 1}/{args.reps}, {way} {mode}: "
                              + ", ".join(f"{f} {figures[way, mode][-1][f]:.3f} s" for f in FIGURES), flush=True)
                finally:
                    for load_id in done:
                        scratch.forget_load(conns.pg_dsn, conns.kafka_bootstrap, load_id)
                    scratch.drop_table(conns.pg_dsn, table)
    print(report(args.rows, figures))


if __name__ == "__main__":
    main()
