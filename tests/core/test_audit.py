"""The audit on real servers: rules measured where the rows were staged (SQL over the
Postgres staging table, the staged records' JSON in the staging topic), holding nothing
while it runs; the report stored and printed by `show --audit`; an error aborts the load
before anything is made ready."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jsonschema
import psycopg2

from support import count_table_rows, make_df, make_spec, read_topic, table_of, topic_of
from twophase.audit import DuplicateKeys, NullShare, RowCount, RowCountChange, SqlRule, ValueRange
from twophase.audit.report import schema
from twophase.gates import audit_step
from twophase.gates.audit_step import AuditGate
from twophase.participants.postgres import prepared_gids
from twophase.protocol import coordinator
from twophase.protocol.states import State

ROWS = 300


def _prepared(spark, txlog, conns, target, run_id, mode="append"):
    spec = make_spec(target, run_id=run_id, mode=mode, replace_where={"day": "2026-11-20"} if mode == "replace" else None)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    return spec


def test_rules_measure_the_staged_data_and_the_report_is_kept(spark, txlog, conns, target, pg_dsn):
    table, topic = target["table"], target["topic"]
    first = _prepared(spark, txlog, conns, target, f"{topic}-1")
    assert audit_step.audit(txlog, conns, first.load_id, [RowCount(table, error=(1, None))]).verdict == "pass"
    assert coordinator.vote(txlog, conns, first.load_id, gates=[AuditGate(required=True)]).state == State.COMMITTING
    coordinator.commit(txlog, conns, first.load_id)

    second = _prepared(spark, txlog, conns, target, f"{topic}-2", "replace")  # the pipeline's next load of the day
    rules = [
        SqlRule("big customers", table, "select count(*) from {staged} where orders > 5", warn=(None, 10)),
        NullShare(topic, "customer_id", error=(0, 0)),
        DuplicateKeys(table, ("customer_id", "day"), error=(0, 0)),
        ValueRange(table, "orders", low=1, high=1000, error=(0, 0)),
        RowCountChange(table, warn=(-0.1, 0.1)),
    ]
    report = audit_step.audit(txlog, conns, second.load_id, rules)
    assert [(r.rule, r.verdict) for r in report.results] == [
        ("big customers", "warn"), (f"null_share({topic}.customer_id)", "pass"),
        (f"duplicate_keys({table}: customer_id, day)", "pass"), (f"value_range({table}.orders in 1..1000)", "pass"),
        (f"row_count_change({table})", "pass")], [r.describe() for r in report.results]
    with_sql = report.results[0]
    assert with_sql.value > 10 and with_sql.detail == "from SQL over the staged rows"
    assert report.results[4].detail == f"{ROWS} rows against {ROWS} in the last committed load"
    # The audit held nothing and made nothing visible.
    assert [g for g in prepared_gids(pg_dsn) if second.load_id in g] == []
    assert count_table_rows(pg_dsn, table_of(second).table, second.load_id) == 0

    shown = subprocess.run([sys.executable, "-m", "twophase", "show", second.load_id, "--audit"],
                           capture_output=True, text=True, timeout=120, env=os.environ)
    assert shown.returncode == 0, shown.stderr
    stored = json.loads(shown.stdout)
    jsonschema.validate(stored, schema())
    assert stored == report.to_json() and stored["verdict"] == "warn"
    decided = coordinator.vote(txlog, conns, second.load_id, gates=[AuditGate(required=True)])
    assert decided.state == State.COMMITTING, f"a warning does not stop the load: {decided.reason}"
    coordinator.commit(txlog, conns, second.load_id)


def test_an_error_aborts_the_load_naming_the_rule(spark, txlog, conns, target, pg_dsn, kafka_bootstrap):
    spec = _prepared(spark, txlog, conns, target, f"{target['topic']}-error")
    rules = [ValueRange(target["table"], "orders", high=3, error=(0, 0)),
             SqlRule("no such column", target["table"], "select max(nope) from {staged}"),
             NullShare(target["table"], "note", warn=(0, 0)), DuplicateKeys(target["table"], ("day",), warn=(0, 0)),
             NullShare(target["topic"], "note", warn=(0, 0))]
    report = audit_step.audit(txlog, conns, spec.load_id, rules)
    assert [r.verdict for r in report.results] == ["error", "error", "warn", "warn", "warn"]
    assert "UndefinedColumn" in report.results[1].detail or "nope" in report.results[1].detail

    decided = coordinator.vote(txlog, conns, spec.load_id, gates=[AuditGate(required=True)])
    assert decided.state == State.ABORTING and decided.exposed_at is None
    assert f"audit: value_range({target['table']}.orders in <= 3) is" in decided.reason
    assert "audit: no such column is not measured" in decided.reason
    # The rows failing the range, as staged, in the quarantine.
    failing = [k for k in txlog.quarantined(spec.load_id) if k.reason == rules[0].name]
    assert len(failing) == report.results[0].value == sum(1 for i in range(ROWS) if i % 7 + 1 > 3)
    assert {k.source for k in failing} == {target["table"]}
    assert all(json.loads(k.content)["orders"] > 3 and json.loads(k.content)["day"] == "2026-11-20" for k in failing)
    kept = txlog.quarantined(spec.load_id)
    nulls = {t: [json.loads(k.content) for k in kept if k.reason == f"null_share({t}.note)"]
             for t in (target["table"], target["topic"])}
    assert [len(rows) for rows in nulls.values()] == [ROWS // 5] * 2  # every fifth row has no note
    assert all(row.get("note") is None for rows in nulls.values() for row in rows)
    repeated = [json.loads(k.content) for k in kept if k.reason == rules[3].name]
    assert len(repeated) == ROWS - 1 and len({r["customer_id"] for r in repeated}) == ROWS - 1, \
        "every row but the first of the one day"
    assert not [k for k in kept if k.reason == rules[1].name], "a rule that measured nothing counted no rows"
    shown = subprocess.run([sys.executable, "-m", "twophase", "show", spec.load_id, "--rejected"],
                           capture_output=True, text=True, timeout=120, env=os.environ)
    assert shown.returncode == 0, shown.stderr
    assert f"{len(kept)} staged rows failing audit rules" in shown.stdout
    assert f"{rules[0].name}: {len(failing)} kept" in shown.stdout
    coordinator.rollback(txlog, conns, spec.load_id)
    assert count_table_rows(pg_dsn, table_of(spec).table, spec.load_id) == 0
    assert read_topic(kafka_bootstrap, topic_of(spec).topic) == []
    assert txlog.get(spec.load_id).state == State.ABORTED


def test_a_sql_rule_can_neither_write_nor_outlive_its_time_limit(spark, txlog, conns, target, pg_dsn):
    """A query that tries to end its read-only transaction and write, and one that never
    ends: both are errors naming why, nothing was written, and no session of the audit is
    left running its query."""
    spec = _prepared(spark, txlog, conns, target, f"{target['topic']}-sql")
    table = target["table"]
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"insert into {table} values ('sentinel', '2026-01-01', 1, 1, null, 'not a load')")
    rules = [SqlRule("writes", table, f"select 1 from {{staged}}; commit; delete from {table}"),
             SqlRule("writes in a WITH", table, f"with gone as (delete from {table} returning 1) "
                                                "select count(*) from {staged}, gone"),
             SqlRule("sleeps", table, "select count(*) from {staged}, pg_sleep(30)", time_limit=1)]
    started = time.monotonic()
    report = audit_step.audit(txlog, conns, spec.load_id, rules)
    assert time.monotonic() - started < 20, "the audit waited for the sleeping rule"
    assert [r.verdict for r in report.results] == ["error"] * 3, [r.describe() for r in report.results]
    assert "SyntaxError" in report.results[0].detail, report.results[0].detail
    assert "FeatureNotSupported" in report.results[1].detail or "ReadOnly" in report.results[1].detail, \
        report.results[1].detail
    assert ("statement timeout" in report.results[2].detail or "time limit of 1 s" in report.results[2].detail), \
        report.results[2].detail
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        # Its statement may start late on a busy machine: watch it for a while, and see it
        # never run longer than its limit (the server cancels it at 1 s; unlimited, 30 s).
        longest, watch_until = 0.0, time.monotonic() + 8
        while time.monotonic() < watch_until:
            cur.execute("select coalesce(max(extract(epoch from now() - query_start)), 0) from pg_stat_activity "
                        "where query like %s and state = 'active' and pid <> pg_backend_pid()", ("%pg_sleep(30)%",))
            longest = max(longest, float(cur.fetchone()[0]))
            conn.commit()  # now() moves on with each transaction
            time.sleep(0.2)
        assert longest < 4, f"the sleeping rule's query ran {longest:.1f} s, past its limit of 1 s"
        cur.execute(f"select customer_id from {table}")
        assert cur.fetchall() == [("sentinel",)], "a rule wrote to the table"
    coordinator.rollback(txlog, conns, spec.load_id)
