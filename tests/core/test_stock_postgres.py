"""A Postgres server as it ships (max_prepared_transactions = 0) in a load: it commits as the
load's last resource (docs/adr/0011), chosen at begin, beside a prepared database, a topic
and an Iceberg table; two such databases in one load are refused at begin; and a restart
of that server during its commit ends the load as the server decided: what it kept is the
outcome, and recovery agrees.

The stack runs a stock server (`scripts/stack`: its databases twophase_stock and
twophase_stock_reports). The restart tests stop one as a crash (`pg_ctl stop -m
immediate`), so they get a throwaway cluster of their own (tests/core/throwaway_postgres.py)
and never touch the stack's servers; the transaction log and the prepared database are the
stack's.
"""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg2
import pytest

from support import (ICEBERG_COLUMNS, count_iceberg_rows, count_table_rows, drop_iceberg_table, header, make_df,
                     read_topic)
from throwaway_postgres import throwaway_postgres
from twophase import failpoints
from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.log import UnknownLoad
from twophase.ops import cli, recovery
from twophase.ops.verify import verify
from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import KafkaTarget
from twophase.participants.memory import Crashed
from twophase.participants.postgres import PostgresTarget, staging_tables
from twophase.protocol import coordinator
from twophase.protocol.coordinator import RetryLater, TwoLastResources
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows
from twophase.spec import LoadSpec

ROWS = 300
STOCK = "stock"  # the connection name of the stock server


def _tables(dsns: dict[str, str], name: str) -> dict[str, str]:
    """A fresh table shaped like make_df's rows in each database of `dsns`; {key: table}."""
    tables = {}
    for key, dsn in dsns.items():
        tables[key] = f"core_tests.{name}_{key}"
        _query(dsn, "create schema if not exists core_tests")
        _query(dsn, f"""create table {tables[key]} (customer_id text not null, day date not null,
                        orders int not null, revenue numeric(12, 2), note text, load_id text not null)""")
    return tables


@pytest.fixture
def everywhere(pg_dsn, stock_dsn, kafka_bootstrap, iceberg_catalog, unique_name):
    """A spec writing a table of the stack's stock database, one of its prepared database,
    a topic and an Iceberg table (the load creates it; purged after), and its connections."""
    tables = _tables({"stock": stock_dsn, "prepared": pg_dsn}, unique_name)
    pipeline = f"stock_{unique_name}"[:60]
    spec = LoadSpec(load_id=load_id_for(pipeline, unique_name), pipeline=pipeline, run_id=unique_name, targets=(
        PostgresTarget(tables["stock"], connection=STOCK), PostgresTarget(tables["prepared"]),
        KafkaTarget(unique_name.replace("_", "-"), "customer_id"),
        IcebergTarget(f"core_tests.{unique_name}", columns=ICEBERG_COLUMNS, partition_by=("day",))))
    yield spec, Connections(pg_dsn, kafka_bootstrap, {STOCK: ("postgres", stock_dsn)},
                            iceberg_catalog=iceberg_catalog), tables
    drop_iceberg_table(f"core_tests.{unique_name}")


@pytest.mark.parametrize("decision", ["COMMIT", "ABORT"])
def test_a_load_into_a_stock_and_a_prepared_database_a_topic_and_an_iceberg_table_is_all_or_nothing(
        spark, txlog, pg_dsn, stock_dsn, kafka_bootstrap, everywhere, decision, capsys):
    spec, conns, tables = everywhere
    begun = coordinator.begin(txlog, spec, conns)
    assert begun.spec().describe_last_resource() == (
        "postgres@stock commits last, without a prepared transaction (its server has max_prepared_transactions = 0)"
        ": its commit is the load's decision, once every other participant is ready")
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    decided = coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS if decision == "COMMIT" else ROWS + 1)])
    assert decided.decision == decision, decided.reason
    if decision == "COMMIT":
        assert (count_table_rows(stock_dsn, tables["stock"], spec.load_id),
                count_table_rows(pg_dsn, tables["prepared"], spec.load_id)) == (ROWS, 0), "it commits alone, first"
        coordinator.commit(txlog, conns, spec.load_id)
    else:
        coordinator.rollback(txlog, conns, spec.load_id)
    load = txlog.get(spec.load_id)
    assert load.state == (State.COMMITTED if decision == "COMMIT" else State.ABORTED)
    rows = ROWS if decision == "COMMIT" else 0
    topic, iceberg = spec.targets[2].topic, spec.targets[3].table
    assert {"stock": count_table_rows(stock_dsn, tables["stock"], spec.load_id),
            "prepared": count_table_rows(pg_dsn, tables["prepared"], spec.load_id),
            "topic": sum(1 for r in read_topic(kafka_bootstrap, topic) if header(r, "load_id") == spec.load_id),
            "iceberg": count_iceberg_rows(iceberg, spec.load_id)} == dict.fromkeys(
        ("stock", "prepared", "topic", "iceberg"), rows)
    assert _query(stock_dsn, "select decision from twophase.decisions where load_id = %s", spec.load_id) == [
        (decision,)]
    [finding] = verify(txlog, conns, [load])
    assert finding.ok, finding
    for dsn in (pg_dsn, stock_dsn):
        assert spec.load_id not in staging_tables(dsn).values(), "a staging table leaked"

    # What an operator reads: status's line under the load, show's JSON.
    assert cli.main(["status", "--pipeline", spec.pipeline], connect=lambda: conns) == 0
    assert begun.spec().describe_last_resource() in capsys.readouterr().out
    assert cli.main(["show", spec.load_id, "--json"], connect=lambda: conns) == 0
    assert json.loads(capsys.readouterr().out)["last_resource"] == {
        "participant": "postgres@stock", "why": "its server has max_prepared_transactions = 0"}


def test_two_stock_databases_in_one_load_are_refused_at_begin_with_nothing_logged_or_staged(
        txlog, pg_dsn, stock_dsn, stock_reports_dsn, kafka_bootstrap, unique_name):
    tables = _tables({"stock": stock_dsn, "reports": stock_reports_dsn}, unique_name)
    conns = Connections(pg_dsn, kafka_bootstrap, {STOCK: ("postgres", stock_dsn),
                                                  "stock_reports": ("postgres", stock_reports_dsn)})
    spec = LoadSpec(load_id=load_id_for("core_tests", unique_name), pipeline="core_tests", run_id=unique_name,
                    targets=(PostgresTarget(tables["stock"], connection=STOCK),
                             PostgresTarget(tables["reports"], connection="stock_reports")))
    with pytest.raises(TwoLastResources) as refused:
        coordinator.begin(txlog, spec, conns)
    assert str(refused.value) == (
        f"load {spec.load_id} cannot be atomic: postgres@stock cannot prepare (its server has "
        "max_prepared_transactions = 0); postgres@stock_reports cannot prepare (its server has "
        "max_prepared_transactions = 0). At most one participant of a load may commit without preparing, as its "
        "last resource: let all but one prepare (Postgres: max_prepared_transactions above 0 in postgresql.conf, "
        "then a restart), or load them in pipelines of their own. Nothing was staged.")
    with pytest.raises(UnknownLoad):
        txlog.get(spec.load_id)
    for dsn in (stock_dsn, stock_reports_dsn):
        assert spec.load_id not in staging_tables(dsn).values()


def _query(dsn: str, sql: str, *args):
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(sql, args or None)
        return cur.fetchall() if cur.description else None


@pytest.fixture(scope="module")
def stock():
    with throwaway_postgres("max_prepared_transactions = 0") as server:
        yield server


@pytest.fixture
def load(stock, pg_dsn, kafka_bootstrap, unique_name):
    """A spec writing a table of the stock server and one of the stack's database, and its
    connections."""
    tables = _tables({"stock": stock.dsn, "prepared": pg_dsn}, unique_name)
    pipeline = f"stock_{unique_name}"[:60]  # its own: recovery of the pipeline never meets another test's load
    spec = LoadSpec(load_id=load_id_for(pipeline, unique_name), pipeline=pipeline, run_id=unique_name,
                    targets=(PostgresTarget(tables["stock"], connection=STOCK), PostgresTarget(tables["prepared"])))
    return spec, Connections(pg_dsn, kafka_bootstrap, {STOCK: ("postgres", stock.dsn)}), tables


def _seen(stock, pg_dsn, tables, spec) -> dict[str, int]:
    return {"stock": count_table_rows(stock.dsn, tables["stock"], spec.load_id),
            "prepared": count_table_rows(pg_dsn, tables["prepared"], spec.load_id)}


def _marker(stock, spec) -> str | None:
    rows = _query(stock.dsn, "select decision from twophase.decisions where load_id = %s", spec.load_id)
    return rows[0][0] if rows else None


# Where the stock server is stopped as a crash (and started again) during its commit ->
# what the server kept, which recovery then finishes.
RESTARTS = {"pg.last_promoted": State.ABORTED,   # its rows and COMMIT marker written, COMMIT not yet sent
            "pg.last_committed": State.COMMITTED}  # COMMIT done, and the vote dies before it learns so


@pytest.mark.parametrize("point", list(RESTARTS))
def test_a_stock_server_crashing_during_its_commit_decides_the_load_and_recovery_agrees(
        spark, txlog, stock, pg_dsn, load, monkeypatch, point):
    spec, conns, tables = load
    coordinator.begin(txlog, spec, conns)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    hit = failpoints.hit

    def restart_at(name):
        hit(name)
        if name == point:
            stock.restart(crash=True)
            if point == "pg.last_committed":
                raise Crashed("the vote's process died with the server")
    monkeypatch.setattr(failpoints, "hit", restart_at)
    with pytest.raises((RetryLater, Crashed)) as raised:
        coordinator.vote(txlog, conns, spec.load_id)
    monkeypatch.undo()
    if point == "pg.last_promoted":  # the connection was lost before COMMIT: the vote cannot know
        assert "its commit is the load's decision" in str(raised.value)
    assert txlog.get(spec.load_id).state == State.PREPARED

    actions = [a for a in recovery.recover(txlog, conns, deadline=timedelta(0), pipeline=spec.pipeline)
               if a.load_id == spec.load_id]
    final = RESTARTS[point]
    assert actions and actions[0].action == ("presumed abort" if final == State.ABORTED else "commit re-driven"), \
        actions
    assert txlog.get(spec.load_id).state == final
    committed = final == State.COMMITTED
    assert _seen(stock, pg_dsn, tables, spec) == {"stock": ROWS if committed else 0,
                                                  "prepared": ROWS if committed else 0}
    assert _marker(stock, spec) == ("COMMIT" if committed else "ABORT")
    assert spec.load_id not in staging_tables(stock.dsn).values()
