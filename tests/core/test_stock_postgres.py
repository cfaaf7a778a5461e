"""A Postgres server as it ships (max_prepared_transactions = 0) in a load: it commits as the
load's last resource (docs/adr/0011), chosen at begin, and a restart of that server during
its commit ends the load as the server decided: what it kept is the outcome, and recovery
agrees.

The stock server here is a throwaway cluster (tests/core/throwaway_postgres.py), so that
it can be stopped as a crash (`pg_ctl stop -m immediate`) without touching the stack's
own servers; the transaction log and the prepared database are the stack's.
"""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg2
import pytest

from support import count_table_rows, make_df
from throwaway_postgres import throwaway_postgres
from twophase import failpoints
from twophase.connections import Connections
from twophase.ids import load_id_for
from twophase.ops import cli, recovery
from twophase.participants.memory import Crashed
from twophase.participants.postgres import PostgresTarget, staging_tables
from twophase.protocol import coordinator
from twophase.protocol.coordinator import RetryLater
from twophase.protocol.states import State
from twophase.spec import LoadSpec

ROWS = 300
STOCK = "stock"  # the connection name of the stock server


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
    tables = {"stock": f"public.{unique_name}", "prepared": f"core_tests.{unique_name}"}
    for dsn, table in ((stock.dsn, tables["stock"]), (pg_dsn, tables["prepared"])):
        _query(dsn, "create schema if not exists core_tests")
        _query(dsn, f"""create table {table} (customer_id text not null, day date not null, orders int not null,
                        revenue numeric(12, 2), note text, load_id text not null)""")
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


def test_a_stock_server_is_chosen_as_the_last_resource_at_begin_and_its_commit_decides(
        spark, txlog, stock, pg_dsn, load, capsys):
    spec, conns, tables = load
    begun = coordinator.begin(txlog, spec, conns)
    assert begun.spec().describe_last_resource() == (
        "postgres@stock commits last, without a prepared transaction (its server has max_prepared_transactions = 0)"
        ": its commit is the load's decision, once every other participant is ready")
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))

    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    assert _seen(stock, pg_dsn, tables, spec) == {"stock": ROWS, "prepared": 0}, "the last resource commits alone"
    assert _marker(stock, spec) == "COMMIT"
    coordinator.commit(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.COMMITTED
    assert _seen(stock, pg_dsn, tables, spec) == {"stock": ROWS, "prepared": ROWS}
    assert spec.load_id not in staging_tables(stock.dsn).values()

    # What an operator reads: status's line under the load, show's JSON.
    assert cli.main(["status", "--pipeline", spec.pipeline], connect=lambda: conns) == 0
    status = capsys.readouterr().out
    assert begun.spec().describe_last_resource() in status
    assert cli.main(["show", spec.load_id], connect=lambda: conns) == 0
    assert json.loads(capsys.readouterr().out)["last_resource"] == {
        "participant": "postgres@stock", "why": "its server has max_prepared_transactions = 0"}


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
