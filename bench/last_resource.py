"""A Postgres table committed as the load's last resource beside the same table committed
with a prepared transaction, in one run (issue 26, docs/adr/0011).

    python -m bench.last_resource [--rows 1000000] [--reps 3] [--shape narrow]

Needs the stack: scripts/stack up; eval "$(scripts/stack env)". Each repetition loads the
same generated rows (bench/data.py) into a fresh table of the stack's database and a fresh
topic, through the core (begin, prepare, vote, commit), once each way, alternating which
goes first: "prepared" (the table's vote prepares a transaction, phase 2 sends COMMIT
PREPARED) and "last resource" (the same server, its table with prepared=False: the vote
promotes the staging and commits it in one local transaction, which is the decision). One
server for both, so the figures compare the ways and not two servers.

Per way, medians of:
  vote         the vote step: ready (the promotion and PREPARE TRANSACTION, or the check
               of staging), then the last resource's commit;
  phase 2      the commit step: Kafka's copy, then COMMIT PREPARED (or the last resource's
               ALREADY_DONE);
  pg commit    the Postgres participant's own commit calls (Outcome.seconds), summed:
               COMMIT PREPARED, or the last resource's local transaction in the vote;
  exposure     the log's exposure window: from the vote making participants ready to the
               end of phase 2 (locks held on the table, an open copy transaction);
  load         begin to COMMITTED.
Medians go to stdout as a Markdown table.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import DECISIONS, PostgresParticipant, PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spec import LoadSpec

from . import scratch, session
from .data import KEY_COLUMN, Dataset

WAYS = {"prepared": None, "last resource": False}  # PostgresTarget.prepared of each way
FIGURES = ("vote", "phase 2", "pg commit", "exposure", "load")


@contextmanager
def pg_commits(seconds: list[float]):
    """Times every PostgresParticipant.commit call (the vote's and phase 2's) into `seconds`."""
    original = PostgresParticipant.commit

    def timed(self, vote=None):
        started = time.perf_counter()
        try:
            return original(self, vote)
        finally:
            seconds.append(time.perf_counter() - started)

    PostgresParticipant.commit = timed
    try:
        yield
    finally:
        PostgresParticipant.commit = original


def load(data: Dataset, conns: Connections, log: PostgresLog, prepared: bool | None) -> dict[str, float]:
    """One load of `data` into a fresh table and topic; seconds per FIGURES."""
    name = scratch.new_name()
    table = scratch.create_table(conns.pg_dsn, data.shape, name)
    topic = KafkaTarget(f"{scratch.TOPIC_PREFIX}{name}", KEY_COLUMN, partitions=scratch.PARTITIONS)
    spec = LoadSpec(load_id=load_id_for(scratch.PIPELINE, name), pipeline=scratch.PIPELINE, run_id=name,
                    targets=(PostgresTarget(table, prepared=prepared), topic))
    commits: list[float] = []
    try:
        started = time.perf_counter()
        begun = coordinator.begin(log, spec, conns)
        assert (begun.spec().last_resource == "postgres") == (prepared is False), begun.spec()
        coordinator.prepare(log, conns, spec.load_id, data.df)
        with pg_commits(commits):
            mark = time.perf_counter()
            decided = coordinator.vote(log, conns, spec.load_id)
            vote = time.perf_counter() - mark
            if decided.state != State.COMMITTING:
                raise RuntimeError(f"the bench load was not decided COMMIT: {decided.state.value} {decided.reason}")
            mark = time.perf_counter()
            coordinator.commit(log, conns, spec.load_id)
            phase2 = time.perf_counter() - mark
        total = time.perf_counter() - started
        committed = log.get(spec.load_id)
        got = scratch.count_rows(conns.pg_dsn, table)
        assert got == data.rows, f"the load committed {got} rows of {data.rows}"
        return {"vote": vote, "phase 2": phase2, "pg commit": sum(commits), "load": total,
                "exposure": (committed.finished_at - committed.exposed_at).total_seconds()}
    finally:
        scratch.settle(log, conns, spec.load_id)
        scratch.drop_table(conns.pg_dsn, table)
        scratch.delete_topics(conns.kafka_bootstrap, [topic.topic, topic.staging_topic])
        scratch.forget_load(conns.pg_dsn, conns.kafka_bootstrap, spec.load_id)
        if scratch.sql(conns.pg_dsn, "select to_regclass(%s)", args=(DECISIONS,))[0][0]:  # made by the first load
            scratch.sql(conns.pg_dsn, f"delete from {DECISIONS} where load_id = %s", args=(spec.load_id,))


def report(rows: int, figures: dict[str, list[dict[str, float]]]) -> str:
    """Medians per way, side by side, as a Markdown table."""
    lines = [f"{rows:,} rows, {len(next(iter(figures.values())))} repetitions per way (median seconds)", "",
             "| way | " + " | ".join(FIGURES) + " |", "|---|" + "---:|" * len(FIGURES)]
    for way, reps in figures.items():
        lines.append(f"| {way} | " + " | ".join(f"{statistics.median(r[f] for r in reps):.3f}" for f in FIGURES)
                     + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = session.load_options("python -m bench.last_resource", __doc__, argv)
    figures: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    with session.on_stack(args) as (conns, log, data):
        for rep in range(args.reps):
            ways = list(WAYS) if rep % 2 == 0 else list(reversed(WAYS))  # alternate which goes first
            for way in ways:
                figures[way].append(load(data, conns, log, WAYS[way]))
                print(f"bench.last_resource: repetition {rep + 1}/{args.reps}, {way}: "
                      + ", ".join(f"{f} {s:.3f} s" for f, s in figures[way][-1].items()), flush=True)
    print(report(args.rows, figures))


if __name__ == "__main__":
    main()
