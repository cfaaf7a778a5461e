"""A person approves a load before it is published: the example pipeline triggered with
`approval` on, answered through Airflow's REST API (the browser's answers are in
test_airflow_ui), on the real Airflow (api-server, scheduler, LocalExecutor).

While the approval waits (half a minute here: the run's timeout is a param, and the test
gives it the shortest that still lets it look eight times), the load holds nothing on its targets: no
prepared transaction, no lock on the target tables, no open transaction on the topic (none
that lasts: the tables and the topic are the example DAG's, which other tests load at the
same time), and a concurrent writer updates the table's rows of the very day. Approve: the vote commits
and the log records who approved and how soon the data was visible. Reject: the vote
aborts naming who rejected. No answer within the run's timeout: rejected by nobody.
"""

from __future__ import annotations

import time
import uuid

import psycopg2
import pytest

from airflow_api import AirflowApi
from orders_sample.generate import generate
from support import count_table_rows, fresh_day, orders_landing, topic_ends
from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.participants.postgres import prepared_gids
from twophase.protocol.states import State

pytestmark = [pytest.mark.ui, pytest.mark.slow]

DAG_ID = "orders_daily_totals"
TABLE, SUMMARY, TOPIC = "analytics.customer_daily_totals", "analytics.orders_daily_summary", "customer-daily-totals"
WAIT_S = 30  # how long the unanswered approval waits before it times out
CHECK_EVERY_S = 2
HELD_S = 15  # what another test's commit holds on the shared targets is gone within this


@pytest.fixture(scope="module")
def api(airflow_ui) -> AirflowApi:
    return AirflowApi(*airflow_ui)


def _ask(api: AirflowApi, pg_dsn: str, **conf) -> tuple[str, str]:
    """Trigger a load of a fresh day that asks for approval; return (run id, load id) once
    its approve task waits for an answer."""
    day = fresh_day(pg_dsn)
    generate(orders_landing(), day, 2000, bad_share=0.0)
    run_id = f"approval_{uuid.uuid4().hex[:8]}"
    api.trigger(DAG_ID, run_id, {"date": day.isoformat(), "approval": True, **conf})
    api.wait_for_task(DAG_ID, run_id, "approve", {"awaiting_input"})
    return run_id, load_id_for(DAG_ID, run_id)


def _sql(dsn: str, sql: str, *args):
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(sql, args or None)
        return cur.fetchall() if cur.description else cur.rowcount


def _assert_holds_nothing(pg_dsn: str, stock_dsn: str, kafka_bootstrap: str, load_id: str, day: str) -> None:
    """The waiting load holds nothing: no prepared transaction of its own, no lock on the
    target tables (the summary's on the stock server) and no open transaction on the topic
    that outlasts HELD_S, and a writer updates the day's rows at once. The tables and the
    topic are the example DAG's, which tests on other workers load meanwhile: a lock or a
    transaction of their commits lasts seconds and is gone within HELD_S, where one of this
    load's would last the whole wait.
    The locks of prepared transactions (held by no session) are the first check's: it
    looks for this load's by gid, and other loads' may wait for their recovery."""
    assert [g for g in prepared_gids(pg_dsn) if load_id in g] == [], "a prepared transaction while it waits"
    for dsn, table in ((pg_dsn, TABLE), (stock_dsn, SUMMARY)):
        _never_held(lambda: _sql(dsn, "select l.pid, l.mode, a.application_name, a.state, left(a.query, 200) "
                                      "from pg_locks l join pg_stat_activity a on a.pid = l.pid "
                                      "where l.relation = %s::regclass", table),
                    f"a lock on {table} while it waits")
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:  # a writer of the day's rows
        cur.execute("set lock_timeout = '2s'")
        cur.execute(f"update {TABLE} set orders = orders + 1 where day = %s and load_id = 'writer'", (day,))
        assert cur.rowcount == 1

    def open_transactions():
        committed, written = (topic_ends(kafka_bootstrap, TOPIC, i) for i in ("read_committed", "read_uncommitted"))
        return [(p, c, w) for p, (c, w) in enumerate(zip(committed, written)) if c != w]
    _never_held(open_transactions, "an open transaction on the topic while it waits")


def _assert_audit_passed(audit: dict) -> None:
    """Every rule of the example DAG's audit passed but the row count change, which compares
    with the pipeline's last committed load: a load of another test, of another size,
    when tests on other workers load the example DAG meanwhile. It may warn, never fail."""
    verdicts = {r["kind"]: r["verdict"] for r in audit["rules"]}
    assert verdicts.pop("row_count_change") in ("pass", "warn"), audit
    assert set(verdicts.values()) == {"pass"} and len(audit["rules"]) == 4, audit


def _never_held(held, what: str) -> None:
    """held() returns what is held now; it must be nothing within HELD_S."""
    deadline = time.monotonic() + HELD_S
    while found := held():
        assert time.monotonic() < deadline, f"{what}, for {HELD_S} s and more: {found}"
        time.sleep(1)


def test_an_unanswered_approval_holds_nothing_while_it_waits_then_rejects(api, pg_dsn, stock_dsn, kafka_bootstrap):
    txlog = PostgresLog(pg_dsn)
    run_id, load_id = _ask(api, pg_dsn, approval_timeout_minutes=WAIT_S / 60)
    load = txlog.get(load_id)
    day = load.data_interval_start.date().isoformat()
    # A row of the same day that another writer owns (a customer the sample never has).
    _sql(pg_dsn, f"insert into {TABLE} values ('writer', %s, 1, 1.00, now(), now(), 'writer')", day)
    try:
        assert load.state == State.PREPARED and load.exposed_at is None
        _assert_audit_passed(load.audit)
        request = api.hitl(DAG_ID, run_id, "approve")
        assert request["subject"] == f"Publish load {load_id}?" and request["defaults"] == ["Reject"]
        verdict = load.audit["verdict"].upper()
        assert f"audit of load {load_id}: {verdict}" in request["body"] and "nothing is held on" in request["body"]

        checks, started = 0, time.monotonic()
        while api.task_state(DAG_ID, run_id, "approve") == "awaiting_input":
            _assert_holds_nothing(pg_dsn, stock_dsn, kafka_bootstrap, load_id, day)
            checks += 1
            time.sleep(CHECK_EVERY_S)
        waited = time.monotonic() - started
        assert waited > WAIT_S - 10 and checks >= 8, (waited, checks)

        assert api.wait_for_run(DAG_ID, run_id) == "failed"
        assert [api.task_state(DAG_ID, run_id, t) for t in ("approve", "vote", "commit", "rollback")] == [
            "success", "success", "skipped", "success"]
        load = txlog.get(load_id)
        assert load.state == State.ABORTED and "rejected: nobody answered the approval asked at" in load.reason
        assert load.approval["timed_out"] is True and load.approval["by"] is None
        assert load.exposed_at is None, "a rejected load is never made ready"
        assert count_table_rows(pg_dsn, TABLE, load_id) == 0
        assert _sql(pg_dsn, f"select orders from {TABLE} where day = %s and load_id = 'writer'", day) == [(1 + checks,)]
    finally:
        _sql(pg_dsn, f"delete from {TABLE} where load_id = 'writer'")


def _asked_again(api: AirflowApi, run_id: str, timeout: float = 180) -> bool:
    """Whether the approve task asked again after an answer. Airflow 3.3 can lose an answer
    given within seconds of the request (while it still records the end of the request's
    first try, it retries the task); the retry asks again and says so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = api.task(DAG_ID, run_id, "approve")
        if task["state"] == "success":
            return False
        if task["state"] == "awaiting_input" and task["try_number"] > 1:
            return True
        time.sleep(2)
    raise AssertionError(f"the approve task of {run_id} neither finished nor asked again")


@pytest.mark.parametrize("answer", ["Approve", "Reject"])
def test_an_answer_through_the_rest_api_commits_or_rolls_back_and_names_who(api, airflow_ui, pg_dsn, answer):
    txlog = PostgresLog(pg_dsn)
    run_id, load_id = _ask(api, pg_dsn)
    assert txlog.get(load_id).state == State.PREPARED
    assert api.hitl(DAG_ID, run_id, "approve")["subject"] == f"Publish load {load_id}?"
    if answer == "Approve":  # at once, as a script would
        assert api.answer(DAG_ID, run_id, "approve", answer)["chosen_options"] == [answer]
        if _asked_again(api, run_id):
            time.sleep(10)
            api.answer(DAG_ID, run_id, "approve", answer)
    else:
        time.sleep(10)  # as a person who reads the request first
        assert api.answer(DAG_ID, run_id, "approve", answer)["chosen_options"] == [answer]

    state = api.wait_for_run(DAG_ID, run_id)
    load = txlog.get(load_id)
    user = airflow_ui[1]
    assert load.approval["by"] == user and load.approval["timed_out"] is False
    if answer == "Approve":
        assert state == "success" and load.state == State.COMMITTED
        assert load.approval["decision"] == "approved"
        assert count_table_rows(pg_dsn, TABLE, load_id) == load.expected[TABLE] > 0
        asked_to_end = (load.finished_at - load.exposed_at).total_seconds()
        assert 0 < asked_to_end < (load.finished_at - load.prepared_at).total_seconds(), \
            "the exposure window starts at the vote, after the approval"
    else:
        assert state == "failed" and load.state == State.ABORTED
        assert f"rejected by {user} at " in load.reason and load.exposed_at is None
        assert count_table_rows(pg_dsn, TABLE, load_id) == 0
        assert api.task_state(DAG_ID, run_id, "rollback") == "success"
