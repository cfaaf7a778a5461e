"""Publish by ATTACH PARTITION (PostgresTarget publish="attach", docs/adr/0013), against the
stack's Postgres: a table partitioned by day gets each load's rows as the partition of its
interval, in the load's prepared transaction.

- append: each day's load becomes its own partition, invisible until COMMIT PREPARED; a
  reader of the table is not blocked while the load holds its prepared transaction (ATTACH
  takes SHARE UPDATE EXCLUSIVE), and sees the committed days only;
- replace: the day's partition is swapped whole (the outcome counts the rows it replaced);
  readers wait while the load is prepared (DETACH takes ACCESS EXCLUSIVE), which the test
  measures; a replace rolled back after ready() leaves the old partition as it was;
- refused, naming the problem, with nothing published: a row outside the interval (at
  staging, by the partition's CHECK), a table that is not partitioned, an interval that is
  not whole days of a date key, an append whose day has a partition already (made by
  someone else: a second load of the pipeline's day is refused at begin).
"""

from __future__ import annotations

from datetime import date, timedelta

import psycopg2
import pytest

from support import create_schema, make_df
from twophase.connections import Connections
from twophase.ids import STAGING_SCHEMA, load_id_for
from twophase.ops.verify import verify
from twophase.participants.postgres import PostgresTarget, is_prepared
from twophase.protocol import coordinator
from twophase.protocol.outcome import Kind
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows
from twophase.spec import LoadSpec

DAY = date(2026, 11, 20)
COLUMNS = """customer_id text not null, day date not null, orders int not null, revenue numeric(12, 2),
             note text, load_id text not null, primary key (customer_id, day)"""


@pytest.fixture
def table(pg_dsn, unique_name):
    name = f"core_tests.{unique_name}"
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "core_tests")
        cur.execute(f"create table {name} ({COLUMNS}) partition by range (day)")
    return name


def _spec(table, run, day=DAY, mode="append", hours=24, publish="attach") -> LoadSpec:
    pipeline = table.split(".")[1]
    start = f"{day.isoformat()}T00:00:00+00:00"
    end = (f"{day + timedelta(days=1)}T00:00:00+00:00" if hours == 24 else f"{day.isoformat()}T{hours:02d}:00:00+00:00")
    return LoadSpec(load_id=load_id_for(pipeline, run), pipeline=pipeline, run_id=run,
                    targets=(PostgresTarget(table, mode, publish=publish),), data_interval=(start, end))


def _prepared(spark, txlog, conns, spec, rows, day=DAY, revenue_scale=1):
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, rows, day=day.isoformat(),
                                                            revenue_scale=revenue_scale))
    return spec.load_id


def _committed(spark, txlog, conns, spec, rows, day=DAY, **kwargs):
    load_id = _prepared(spark, txlog, conns, spec, rows, day, **kwargs)
    assert coordinator.vote(txlog, conns, load_id).state == State.COMMITTING
    return load_id, coordinator.commit(txlog, conns, load_id)


def _cursor(dsn):
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn.cursor()


def _loads(cur, table) -> dict:
    cur.execute(f"select load_id, day::text, count(*), sum(revenue)::text from {table} group by 1, 2 order by 2")
    return {lid: (day, n, total) for lid, day, n, total in cur.fetchall()}


def _partitions(cur, table) -> list[str]:
    cur.execute("select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid "
                "where i.inhparent = %s::regclass order by 1", (table,))
    return [r[0] for r in cur.fetchall()]


def _staging_left(cur, *load_ids) -> list[str]:
    cur.execute("select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                "where n.nspname = %s and obj_description(c.oid, 'pg_class') = any(%s)", (STAGING_SCHEMA, list(load_ids)))
    return [r[0] for r in cur.fetchall()]


def test_append_loads_become_partitions_and_readers_go_on_while_one_is_prepared(spark, txlog, conns, table):
    cur, relation = _cursor(conns.pg_dsn), table.split(".")[1]
    first, outcomes = _committed(spark, txlog, conns, _spec(table, "day-1"), 100)
    assert {o.participant: o.kind for o in outcomes} == {"postgres": Kind.DONE}

    second = _prepared(spark, txlog, conns, _spec(table, "day-2", DAY + timedelta(days=1)), 80,
                       DAY + timedelta(days=1))
    assert coordinator.vote(txlog, conns, second).state == State.COMMITTING
    assert is_prepared(conns.pg_dsn, txlog.votes(second)["postgres"].committable["gid"])
    reader = _cursor(conns.pg_dsn)
    reader.execute("set statement_timeout = '3s'")  # blocked by the prepared ATTACH: fails the test
    assert _loads(reader, table) == {first: ("2026-11-20", 100, "49.50")}, "only the committed day is visible"
    reader.execute(f"insert into {table} values ('x', '2026-11-20', 1, 1, null, 'someone else')")
    reader.execute(f"delete from {table} where load_id = 'someone else'")

    coordinator.commit(txlog, conns, second)
    assert _loads(cur, table) == {first: ("2026-11-20", 100, "49.50"), second: ("2026-11-21", 80, "31.60")}
    assert _partitions(cur, table) == [f"{relation}_p20261120", f"{relation}_p20261121"]
    assert _staging_left(cur, first, second) == []
    assert all(f.ok for f in verify(txlog, conns, [txlog.get(first), txlog.get(second)]))


def test_replace_swaps_the_days_partition_and_a_rolled_back_one_keeps_it(spark, txlog, conns, table):
    cur, relation = _cursor(conns.pg_dsn), table.split(".")[1]
    other, _ = _committed(spark, txlog, conns, _spec(table, "other", DAY - timedelta(days=1)), 30,
                          DAY - timedelta(days=1))
    first, _ = _committed(spark, txlog, conns, _spec(table, "first", mode="replace"), 100)
    second = _prepared(spark, txlog, conns, _spec(table, "second", mode="replace"), 50, revenue_scale=3)
    assert coordinator.vote(txlog, conns, second).state == State.COMMITTING
    reader = _cursor(conns.pg_dsn)
    reader.execute("set statement_timeout = '500ms'")
    with pytest.raises(psycopg2.errors.QueryCanceled):  # the prepared DETACH holds ACCESS EXCLUSIVE
        _loads(reader, table)

    outcomes = coordinator.commit(txlog, conns, second)
    assert [(o.kind, o.counts.get("rows"), o.counts.get("deleted")) for o in outcomes] == [(Kind.DONE, 50, 100)]
    assert _loads(cur, table) == {other: ("2026-11-19", 30, "4.35"), second: ("2026-11-20", 50, "36.75")}
    assert _partitions(cur, table) == [f"{relation}_p20261119", f"{relation}_p20261120"]

    third = _prepared(spark, txlog, conns, _spec(table, "third", mode="replace"), 10)
    [postgres] = conns.participants(txlog.get(third).spec(), 1)
    readied = postgres.ready(txlog.votes(third)["postgres"])  # the swap, inside its prepared transaction
    assert readied.yes and readied.committable["deleted"] == 50
    assert coordinator.vote(txlog, conns, third, rules=[MinRows(11)]).state == State.ABORTING
    coordinator.rollback(txlog, conns, third)
    assert not is_prepared(conns.pg_dsn, readied.committable["gid"])
    assert _loads(cur, table) == {other: ("2026-11-19", 30, "4.35"), second: ("2026-11-20", 50, "36.75")}
    assert _partitions(cur, table) == [f"{relation}_p20261119", f"{relation}_p20261120"]
    assert _staging_left(cur, other, first, second, third) == []
    findings = verify(txlog, conns, [txlog.get(lid) for lid in (other, first, second, third)])
    assert all(f.ok for f in findings), findings


def test_a_row_outside_the_interval_fails_the_prepare_naming_the_bound(spark, txlog, conns, table):
    spec = _spec(table, "outside")
    coordinator.begin(txlog, spec)
    with pytest.raises(Exception, match="twophase_in_load_interval"):
        coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 10, day="2026-11-21"))
    cur = _cursor(conns.pg_dsn)
    assert _partitions(cur, table) == [] and _loads(cur, table) == {}


@pytest.mark.parametrize("case", ["not partitioned", "hours of a date key", "append on a taken day"])
def test_what_attach_cannot_publish_is_refused_naming_it(spark, txlog, conns, table, pg_dsn, case):
    cur = _cursor(pg_dsn)
    if case == "not partitioned":
        cur.execute(f"drop table {table}")
        cur.execute(f"create table {table} ({COLUMNS})")
        spec, why = _spec(table, case), "is not partitioned"
    elif case == "hours of a date key":
        spec, why = _spec(table, case, hours=6), "is not whole days"
    else:  # by someone else: the pipeline's own loads of a day are refused at begin
        cur.execute(f"create table {table}_p1 partition of {table} for values from ('2026-11-20') to ('2026-11-21')")
        spec, why = _spec(table, case), "has a partition of the load's interval already"
    coordinator.begin(txlog, spec)
    with pytest.raises(Exception, match=why):
        coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 5))
    assert txlog.get(spec.load_id).state in (State.PREPARING, State.ABORTED)
    assert _staging_left(cur, spec.load_id) == []


def test_a_database_that_cannot_prepare_attaches_in_its_last_resource_commit(spark, txlog, stock_dsn,
                                                                              kafka_bootstrap, unique_name):
    stock = Connections(stock_dsn, kafka_bootstrap)  # max_prepared_transactions = 0: the load's last resource
    table = f"core_tests.{unique_name}"
    cur = _cursor(stock_dsn)
    create_schema(cur, "core_tests")
    cur.execute(f"create table {table} ({COLUMNS}) partition by range (day)")
    loads = []
    for run, rows, mode in (("first", 40, "append"), ("second", 20, "replace")):
        spec = _spec(table, run, mode=mode)
        coordinator.begin(txlog, spec, stock)
        assert txlog.get(spec.load_id).spec().last_resource == "postgres"
        coordinator.prepare(txlog, stock, spec.load_id, make_df(spark, rows))
        assert coordinator.vote(txlog, stock, spec.load_id).state == State.COMMITTING
        [outcome] = coordinator.commit(txlog, stock, spec.load_id)
        loads.append((spec.load_id, outcome.kind, outcome.counts))
    # A last resource commits at the end of the vote (its commit is the decision): phase 2 finds it done.
    assert [(kind, counts) for _, kind, counts in loads] == [(Kind.ALREADY_DONE, {"rows": 40, "deleted": 0}),
                                                              (Kind.ALREADY_DONE, {"rows": 20, "deleted": 40})]
    assert _loads(cur, table) == {loads[1][0]: ("2026-11-20", 20, "1.90")}
    assert _partitions(cur, table) == [f"{unique_name}_p20261120"] and _staging_left(cur, loads[0][0]) == []


def test_the_tables_keys_are_built_on_staging_at_prepare_and_a_duplicate_votes_no(spark, txlog, conns, table):
    cur, relation = _cursor(conns.pg_dsn), table.split(".")[1]
    cur.execute(f"create index on {table} (orders)")
    spec = _spec(table, "keys")
    load_id = _prepared(spark, txlog, conns, spec, 40)
    [staging] = _staging_left(cur, load_id)
    cur.execute("select count(*) from pg_index where indrelid = %s::regclass", (f"{STAGING_SCHEMA}.{staging}",))
    assert cur.fetchone()[0] == 2, "the primary key and the index, built at prepare"
    assert coordinator.vote(txlog, conns, load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, load_id)
    cur.execute("select count(*) from pg_index where indrelid = %s::regclass", (f"{table}_p20261120",))
    assert cur.fetchone()[0] == 2, "ATTACH took them as the table's own, building none"
    assert _loads(cur, table) == {load_id: ("2026-11-20", 40, "7.80")}

    twice = _spec(table, "twice", DAY + timedelta(days=1))
    coordinator.begin(txlog, twice)
    frame = make_df(spark, 10, day="2026-11-21")
    coordinator.prepare(txlog, conns, twice.load_id, frame.unionByName(frame))
    vote = txlog.votes(twice.load_id)["postgres"]
    assert not vote.yes and "break its PRIMARY KEY (customer_id, day)" in vote.reason, vote.reason
    assert coordinator.vote(txlog, conns, twice.load_id).state == State.ABORTING
    coordinator.rollback(txlog, conns, twice.load_id)
    assert _partitions(cur, table) == [f"{relation}_p20261120"] and _staging_left(cur, twice.load_id) == []


def test_a_default_partition_holding_rows_of_the_interval_makes_the_vote_no(spark, txlog, conns, table):
    """ATTACH checks that the table's DEFAULT partition holds no row of the new partition's
    bounds (scanning it under ACCESS EXCLUSIVE): without such rows the load attaches; with
    one, the vote says no, naming the violated constraint, and nothing is published."""
    cur, relation = _cursor(conns.pg_dsn), table.split(".")[1]
    cur.execute(f"create table {table}_rest partition of {table} default")
    cur.execute(f"insert into {table} values ('old', '2026-11-25', 1, 1, null, 'before')")
    load_id, _ = _committed(spark, txlog, conns, _spec(table, "beside-default"), 10)
    assert _loads(cur, table) == {"before": ("2026-11-25", 1, "1.00"), load_id: ("2026-11-20", 10, "0.45")}

    day = DAY + timedelta(days=5)
    refused = _prepared(spark, txlog, conns, _spec(table, "over-default", day), 10, day)
    decided = coordinator.vote(txlog, conns, refused)
    assert decided.state == State.ABORTING and "default partition" in decided.reason, decided.reason
    coordinator.rollback(txlog, conns, refused)
    assert _partitions(cur, table) == [f"{relation}_p20261120", f"{relation}_rest"]
    assert _staging_left(cur, refused) == [] and len(_loads(cur, table)) == 2
