"""Hostile landing data through the real pipeline (Airflow, Spark, Postgres, Kafka): every
line on disk is loaded, rejected with a reason that names its value, counted as a
duplicate or a blank, or its file is reported as not read; nothing half-visible; the
landing folder untouched."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections import Counter
from decimal import Decimal

import pytest

from hostile.catalog import catalog, file_lines, write
from order_rules import REASONS
from orders_sample.generate import generate
from test_orders_pipeline import (assert_verified, folder_digest, loads_of_day, table_rows, topic_records)
from twophase.log import PostgresLog

pytestmark = pytest.mark.slow


def read_rejects(orders_data) -> list[dict]:
    return [json.loads(line) for p in sorted((orders_data / "rejects").rglob("*.json")) for line in p.open()]


def test_every_hostile_line_is_accounted_for(run_dag, orders_data, fresh_day, pg_dsn, kafka_bootstrap):
    cases = catalog(fresh_day)
    folder = orders_data / "landing" / f"date={fresh_day.isoformat()}"
    write(folder, cases)
    before = folder_digest(folder)

    run = run_dag({"date": fresh_day.isoformat(), "max_rejected_share": 1, "max_skipped_files": 3})
    assert run.state == "success", run.output[-4000:]
    [(load_id, state, _reason)] = loads_of_day(pg_dsn, fresh_day)
    assert state == "COMMITTED"
    metrics = PostgresLog(pg_dsn).get(load_id).metrics

    # Lines on disk (of the files read) = orders + duplicates + rejected + blank.
    read_files = {name: data for c in cases for name, data in c.files.items() if name not in c.skipped}
    on_disk = sum(len(file_lines(name, data)) for name, data in read_files.items())
    outcomes = Counter(o for c in cases for o in c.expect)
    assert metrics["input_lines"] == on_disk == sum(outcomes.values())
    assert metrics["input_files"] == len(read_files) - 1  # _SUCCESS: an empty marker, not read
    assert metrics["orders"] == outcomes["valid"]
    assert metrics["duplicate_lines"] == outcomes["duplicate"]
    assert metrics["blank_lines"] == outcomes["blank"]
    expected_rejects = {REASONS[k]: n for k, n in outcomes.items() if k in REASONS}
    assert metrics["rejected_by_reason"] == expected_rejects
    assert metrics["rejected_lines"] == sum(expected_rejects.values())
    assert (metrics["orders"] + metrics["duplicate_lines"] + metrics["rejected_lines"] + metrics["blank_lines"]
            == metrics["input_lines"])

    # Files not read: reported with their paths, in the metrics and prepare's log.
    skipped = sorted(p for c in cases for p in c.skipped)
    assert metrics["skipped_files"] == len(skipped)
    assert sorted(p["path"] for p in metrics["skipped_paths"]) == skipped
    prepare = run.task_log("prepare")
    for path in skipped:
        assert f"not read: file://{folder}/{path}" in prepare

    # Each rejected line is kept with its reason and a detail about its value, per file.
    rejects = read_rejects(orders_data)
    got = Counter((r["file"].rsplit("/", 1)[1], r["reason_key"]) for r in rejects)
    want = Counter()
    for case in cases:
        names = [n for n in case.files if n not in case.skipped]
        per_line = [n for n in names for _ in file_lines(n, case.files[n])]
        for name, outcome in zip(per_line, case.expect):
            if outcome in REASONS:
                want[(name.rsplit("/", 1)[-1], outcome)] += 1
    assert got == want
    assert all(r["detail"] and r["reason"] == REASONS[r["reason_key"]] for r in rejects)
    details = {r["file"].rsplit("/", 1)[1].split("-", 2)[2].removesuffix(".jsonl"): r for r in rejects}
    assert "amount 1E+400 is above 9999999999.99" in details["amount_1e400"]["detail"]
    assert "amount 100000000000.5 is above" in details["amount_above_column"]["detail"]
    assert 'amount is a string ("NaN")' in details["amount_nan_string"]["detail"]
    assert "ordered_at is a number" in details["time_epoch_millis"]["detail"]
    assert "ordered_at is a number" in details["time_epoch_seconds"]["detail"]
    assert 'customer_id "c0000001\\n" is not like c0001234' in details["customer_newline"]["detail"]
    assert "more data after the JSON value" in details["two_objects_on_a_line"]["detail"]
    bad_utf8 = details["invalid_utf8"]
    [(name, data)] = [(n, d) for c in cases if c.name == "invalid_utf8" for n, d in c.files.items()]
    assert base64.b64decode(bad_utf8["line_base64"]) == data.rstrip(b"\n")
    assert "\\xe9" in bad_utf8["line"] and "byte 0xe9" in bad_utf8["detail"]

    # The quarantine keeps the same lines, queryable with the load: `show --rejected`.
    kept = PostgresLog(pg_dsn).quarantined(load_id)
    assert Counter((k.source, k.reason, k.detail, k.content) for k in kept) == Counter(
        (r["file"], r["reason"], r["detail"], r["line"].replace("\x00", "\\x00")) for r in rejects)
    [nul] = [k for k in kept if k.source.endswith("nul_byte_outside_strings.jsonl")]
    assert nul.content.endswith("\\x00}"), "a NUL is kept as the four characters \\x00"
    shown = subprocess.run([sys.executable, "-m", "twophase", "show", load_id, "--rejected"], capture_output=True,
                           text=True, timeout=120, env=os.environ)
    assert shown.returncode == 0, shown.stderr
    assert f"{metrics['rejected_lines']} rejected lines, {len(kept)} kept in the quarantine" in shown.stdout
    for reason, n in expected_rejects.items():
        assert f"{reason}: {n} kept of {n}" in shown.stdout
    assert all(k.describe() in shown.stdout for k in kept)

    # Exactly the valid orders landed, once, on both sides.
    expected_rows = {customer: row for c in cases for customer, row in c.rows.items()}
    rows = table_rows(pg_dsn, fresh_day)
    assert {k: (v[0], v[1]) for k, v in rows.items()} == expected_rows
    records = topic_records(kafka_bootstrap, [load_id])
    assert sorted(m.key().decode() for m in records) == sorted(expected_rows)
    for m in records:
        value = json.loads(m.value(), parse_float=Decimal)
        assert (value["orders"], value["revenue"]) == expected_rows[m.key().decode()]
    assert folder_digest(folder) == before, "the landing folder must be untouched"
    assert_verified(pg_dsn, kafka_bootstrap, fresh_day)


def test_unread_files_refuse_the_day_by_default(run_dag, orders_data, fresh_day, pg_dsn, kafka_bootstrap):
    made = generate(orders_data / "landing", fresh_day, 200, bad_share=0.0)
    (made.folder / "_late.jsonl").write_bytes((made.folder / "part-00000.jsonl").read_bytes())
    (made.folder / "retry").mkdir()
    (made.folder / "retry" / "part-00009.jsonl").write_text('{"order_id":"x"}\n')
    before = folder_digest(made.folder)
    run = run_dag({"date": fresh_day.isoformat()})
    assert run.state == "failed"
    [(load_id, state, reason)] = loads_of_day(pg_dsn, fresh_day)
    assert state == "ABORTED"
    assert reason.startswith("quality gate: 2 input files were not read, above the maximum of 0: _late.jsonl (")
    assert "retry/part-00009.jsonl (17 bytes: in the subfolder retry/" in reason
    assert table_rows(pg_dsn, fresh_day) == {} and topic_records(kafka_bootstrap, [load_id]) == []
    assert "not read: " in run.task_log("prepare") and "input files were not read" in run.task_log("rollback")
    assert folder_digest(made.folder) == before


def test_a_total_beyond_the_column_fails_the_day_clearly(run_dag, orders_data, fresh_day, pg_dsn, kafka_bootstrap):
    folder = orders_data / "landing" / f"date={fresh_day.isoformat()}"
    folder.mkdir(parents=True)
    at = f"{fresh_day.isoformat()}T10:00:00Z"
    (folder / "big.jsonl").write_text("".join(
        json.dumps({"order_id": f"b{i}", "customer_id": "c0000007", "amount": 9999999999.99, "ordered_at": at}) + "\n"
        for i in range(101)))
    run = run_dag({"date": fresh_day.isoformat()})
    assert run.state == "failed"
    [(load_id, state, reason)] = loads_of_day(pg_dsn, fresh_day)
    assert state == "ABORTED"
    assert ("revenue of c0000007 (1,009,999,999,998.99) on " + fresh_day.isoformat()
            + " is above 999,999,999,999.99") in reason, reason
    assert table_rows(pg_dsn, fresh_day) == {} and topic_records(kafka_bootstrap, [load_id]) == []
