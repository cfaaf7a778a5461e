"""The quarantine (twophase.quarantine): rejected lines kept per load and reason, capped
per reason, replaced by a retried prepare, printed by `show --rejected`, and deleted by
recovery's retention sweep."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import psycopg2
import pytest

from support import make_spec
from twophase.gates import quarantine
from twophase.ops import recovery
from twophase.protocol import coordinator


def _rejects(spark, per_reason: dict[str, int]):
    rows = [(reason, f"file:///landing/part-{i % 3}.jsonl", f"{reason} #{i}", f'{{"line": {i}}}\x00')
            for reason, n in per_reason.items() for i in range(n)]
    return spark.createDataFrame(rows, "reason string, source string, detail string, content string")


def _load(txlog, conns, target, name: str) -> str:
    """A load of the log (ended: the quarantine outlives its load)."""
    spec = make_spec(target, run_id=name, pipeline="quarantine_tests")
    coordinator.begin(txlog, spec)
    coordinator.rollback(txlog, conns, spec.load_id, reason="a quarantine test's load")
    return spec.load_id


def test_kept_per_reason_up_to_the_cap_and_replaced_by_a_retry(spark, txlog, conns, target, unique_name):
    load_id = _load(txlog, conns, target, unique_name)
    lines = quarantine.capped(_rejects(spark, {"bad amount": 12, "not JSON": 3}), cap=10)
    assert txlog.quarantine(load_id, lines) == 13
    txlog.quarantine(load_id, lines)  # a retried prepare: still once
    kept = txlog.quarantined(load_id)
    assert [(r, sum(1 for k in kept if k.reason == r)) for r in ("bad amount", "not JSON")] == [
        ("bad amount", 10), ("not JSON", 3)]
    assert all(k.content.endswith("}\\x00") for k in kept), "a NUL is kept as the four characters \\x00"
    assert txlog.quarantined(load_id, limit=4) == kept[:4]
    assert quarantine.capped(_rejects(spark, {"x": 2}), cap=0) == []
    with pytest.raises(Exception, match="needs a 'reason' column"):
        quarantine.capped(spark.createDataFrame([("a",)], "why string"))

    shown = subprocess.run([sys.executable, "-m", "twophase", "show", load_id, "--rejected"], capture_output=True,
                           text=True, timeout=120, env=os.environ)
    assert shown.returncode == 0, shown.stderr
    assert "13 kept in the quarantine" in shown.stdout and "bad amount: 10 kept" in shown.stdout
    assert kept[0].describe() in shown.stdout


def test_recovery_deletes_what_was_kept_longer_than_the_retention(spark, txlog, conns, target, pg_dsn, unique_name):
    old, new = _load(txlog, conns, target, f"{unique_name}-old"), _load(txlog, conns, target, f"{unique_name}-new")
    for load_id in (old, new):
        txlog.quarantine(load_id, quarantine.capped(_rejects(spark, {"bad amount": 4})))
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("update twophase.quarantine set kept_at = now() - interval '8 days' where load_id = %s", (old,))

    actions = recovery.recover(txlog, conns, pipeline="quarantine_tests", quarantine_retention=timedelta(days=7))
    [swept] = [a for a in actions if a.action == "retention sweep"]
    assert "deleted 4 rejected lines kept more than 7 days" in swept.detail
    assert txlog.quarantined(old) == [] and len(txlog.quarantined(new)) == 4
