"""Replace mode swaps a day's rows in one atomic step and leaves other days alone.

The table holds another day's rows (an append load) and day D's rows from a first
replace load. A second replace load of day D (fewer rows, new values) commits while a
SQL reader polls day D in a tight loop: every poll sees exactly the old rows (all of the
first load) or exactly the new ones (all of the second), never both, neither or a mix;
afterwards the old rows are gone, the new ones are there with their new values, and the
other day's rows are untouched. A third replace load of day D that is rolled back after
ready() (which deleted day D's rows inside its prepared transaction) leaves the second
load's rows as they were. verify passes for every load, including the replaced one.
"""

from __future__ import annotations

import time

import psycopg2

from polling import Poller, wait_for
from support import make_df, make_spec
from twophase.ops.verify import verify
from twophase.participants.postgres import is_prepared
from twophase.protocol import coordinator
from twophase.protocol.outcome import Kind
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows

DAY, OTHER_DAY = "2026-11-20", "2026-11-19"


def _prepare(spark, txlog, conns, target, name, rows, day, revenue_scale=1, mode="replace"):
    spec = make_spec(target, run_id=f"{target['topic']}-{name}", mode=mode,
                     replace_where={"day": DAY} if mode == "replace" else None)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, rows, day=day, revenue_scale=revenue_scale))
    return spec.load_id


def _load(spark, txlog, conns, target, name, rows, day, **kwargs):
    load_id = _prepare(spark, txlog, conns, target, name, rows, day, **kwargs)
    assert coordinator.vote(txlog, conns, load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, load_id)
    return load_id


def _day(cur, table, day) -> dict[str, tuple[int, str]]:
    """load_id -> (rows, sum of revenue) of the day's rows."""
    cur.execute(f"select load_id, count(*), sum(revenue)::text from {table} where day = %s group by load_id", (day,))
    return {lid: (n, total) for lid, n, total in cur.fetchall()}


def _rows(cur, table, day) -> list[tuple]:
    cur.execute(f"select customer_id, orders, revenue::text, note, load_id from {table} "
                "where day = %s order by customer_id", (day,))
    return cur.fetchall()


def test_replace_swaps_the_day_atomically_and_rollback_keeps_it(spark, txlog, conns, target):
    table = target["table"]
    other = _load(spark, txlog, conns, target, "other-day", 150, OTHER_DAY, mode="append")
    first = _load(spark, txlog, conns, target, "first", 400, DAY)
    conn = psycopg2.connect(conns.pg_dsn)
    conn.autocommit = True
    cur = conn.cursor()
    # make_df: revenue of row i is (i % 1000) * scale / 100
    old = {first: (400, "798.00")}
    assert _day(cur, table, DAY) == old
    other_rows = _rows(cur, table, OTHER_DAY)
    assert len(other_rows) == 150 and {r[4] for r in other_rows} == {other}

    second = _prepare(spark, txlog, conns, target, "second", 250, DAY, revenue_scale=3)
    assert _day(cur, table, DAY) == old, "the prepared replace must not be visible yet"
    assert coordinator.vote(txlog, conns, second).state == State.COMMITTING
    assert txlog.votes(second)["postgres"].committable["deleted"] == 400, "the vote's ready() deletes the day"
    assert _day(cur, table, DAY) == old, "the readied replace must not be visible yet"
    new = {second: (250, "933.75")}

    poll_conn = psycopg2.connect(conns.pg_dsn)
    poll_conn.autocommit = True
    poll_cur = poll_conn.cursor()
    poller = Poller("sql", lambda: _day(poll_cur, table, DAY))
    try:
        poller.start()
        wait_for(lambda: len(poller.samples) >= 5, "the first polls", [poller])
        commit_started = time.monotonic()
        outcomes = coordinator.commit(txlog, conns, second)
        commit_ended = time.monotonic()
        wait_for(lambda: sum(1 for t, _ in poller.samples if t > commit_ended) >= 20, "polls after the commit",
                 [poller])
    finally:
        poller.stop()
        poll_conn.close()
    assert poller.error is None, f"the poller failed: {poller.error!r}"
    assert {o.participant: (o.kind, o.counts.get("deleted")) for o in outcomes}["postgres"] == (Kind.DONE, 400)

    seen = [day for _, day in poller.samples]
    assert all(day in (old, new) for day in seen), \
        f"a reader saw a mix of old and new rows: {[day for day in seen if day not in (old, new)][:3]}"
    swapped_at = seen.index(new)
    assert seen[swapped_at:] == [new] * (len(seen) - swapped_at), "a reader saw the old rows come back"
    before = [t for t, day in poller.samples if day == old and t >= commit_started]
    assert len(before) >= 3, f"only {len(before)} polls during the commit saw the old rows"
    assert len(seen) - swapped_at >= 20

    assert _day(cur, table, DAY) == new
    assert _rows(cur, table, DAY)[123][:3] == ("c000123", 5, "3.69"), "the new rows carry the new values"
    assert _rows(cur, table, OTHER_DAY) == other_rows, "rows of other days are untouched"

    # A replace that is rolled back after ready() deleted day D's rows keeps them.
    third = _prepare(spark, txlog, conns, target, "third", 100, DAY, revenue_scale=5)
    vote = txlog.votes(third)["postgres"]
    assert not is_prepared(conns.pg_dsn, vote.committable["gid"]), "prepare holds nothing"
    [postgres] = [p for p in conns.participants(txlog.get(third).spec(), 1) if p.name == "postgres"]
    readied = postgres.ready(vote)  # as the vote does once the rules pass: the delete is in the prepared transaction
    gid = readied.committable["gid"]
    assert readied.committable["deleted"] == 250 and is_prepared(conns.pg_dsn, gid)
    assert _day(cur, table, DAY) == new
    assert coordinator.vote(txlog, conns, third, rules=[MinRows(101)]).state == State.ABORTING
    coordinator.rollback(txlog, conns, third)
    assert txlog.get(third).state == State.ABORTED and not is_prepared(conns.pg_dsn, gid)
    assert _day(cur, table, DAY) == new
    assert _rows(cur, table, DAY)[123][:3] == ("c000123", 5, "3.69")
    assert _rows(cur, table, OTHER_DAY) == other_rows
    conn.close()

    loads = [txlog.get(lid) for lid in (other, first, second, third)]
    findings = {f.load_id: f for f in verify(txlog, conns, loads)}
    assert all(f.ok for f in findings.values()), findings
    # the first load's rows were replaced; its Kafka records stay (a topic is append-only)
    assert findings[first].visible == {target["table"]: 0, target["topic"]: 400}
    assert findings[third].visible == {target["table"]: 0, target["topic"]: 0}
