"""One load, many targets: three tables over two databases (two of them fed by different
frames of the job), two topics and an Iceberg table, committed or rolled back as one.

Counts are read back by independent readers (a fresh connection per database counting
rows by load_id, a read_committed consumer counting records by their load_id header, a
pyiceberg scan of the table's current snapshot), never from the log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import REPORTING, ROOT, iceberg_leftovers, iceberg_table, make_df, many_frames, many_seen, many_spec, read_topic
from twophase.ops.verify import verify
from twophase.participants import participant_name
from twophase.participants.iceberg import LOAD_PROPERTY
from twophase.participants.postgres import prepared_gids, staging_tables
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows

ROWS = 400
TARGETS = ("orders", "summary", "reporting", "topic", "topic2", "iceberg")


def load_snapshots(name: str, load_id: str) -> list:
    table = iceberg_table(name)
    return [] if table is None else [s for s in table.snapshots()
                                     if s.summary.additional_properties.get(LOAD_PROPERTY) == load_id]


def test_three_tables_in_two_databases_two_topics_and_an_iceberg_table_commit_as_one(
        spark, txlog, pg_dsn, kafka_bootstrap, reporting_dsn, many, many_conns):
    conns = many_conns
    spec = many_spec(many, many["topic"])
    iceberg = f"iceberg:{many['iceberg']}"
    assert [p.name for p in conns.participants(spec)] == ["postgres", participant_name("postgres", REPORTING),
                                                          "kafka", iceberg]
    coordinator.begin(txlog, spec)
    votes = coordinator.prepare(txlog, conns, spec.load_id, many_frames(spark, ROWS))
    assert votes["postgres"].counts == {many["orders"]: ROWS, many["summary"]: 1}
    assert votes["postgres@reporting"].counts == {many["reporting"]: ROWS}
    assert votes["kafka"].counts == {many["topic"]: ROWS, many["topic2"]: ROWS}
    assert votes[iceberg].counts == {iceberg: ROWS} and votes[iceberg].committable["files"]
    # Prepared: nothing held (no prepared transaction) and nothing visible anywhere yet.
    gids = {v.committable["gid"] for v in votes.values() if "gid" in v.committable}
    assert len(gids) == 2 and not gids & (set(prepared_gids(pg_dsn)) | set(prepared_gids(reporting_dsn)))
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == dict.fromkeys(TARGETS, 0)
    assert load_snapshots(many["iceberg"], spec.load_id) == [], "an Iceberg snapshot before the decision"

    assert coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS)]).state == State.COMMITTING
    # Decided: the vote's ready() prepared one transaction per database; still nothing visible.
    assert gids <= set(prepared_gids(pg_dsn)) | set(prepared_gids(reporting_dsn))
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == dict.fromkeys(TARGETS, 0)
    outcomes = coordinator.commit(txlog, conns, spec.load_id)
    assert [o.participant for o in outcomes] == ["kafka", iceberg, "postgres", "postgres@reporting"], \
        "may-fail commits first, the likeliest to fail (the Kafka copy) first of all"
    assert txlog.get(spec.load_id).state == State.COMMITTED
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == {
        "orders": ROWS, "summary": 1, "reporting": ROWS, "topic": ROWS, "topic2": ROWS, "iceberg": ROWS}
    [snapshot] = load_snapshots(many["iceberg"], spec.load_id)  # one append snapshot, carrying the load id
    assert snapshot.summary.operation.value == "append" and int(snapshot.summary["added-records"]) == ROWS
    assert outcomes[1].counts["snapshot"] == snapshot.snapshot_id
    assert iceberg_leftovers(many["iceberg"], spec.load_id) == []
    # The second topic's records hold only its value columns.
    record = next(m for m in read_topic(kafka_bootstrap, many["topic2"]))
    assert set(json.loads(record.value())) == {"customer_id", "orders"}
    [finding] = verify(txlog, conns, [txlog.get(spec.load_id)])
    assert finding.ok and finding.visible == {many["orders"]: ROWS, many["summary"]: 1, many["reporting"]: ROWS,
                                              many["topic"]: ROWS, many["topic2"]: ROWS, iceberg: ROWS}, finding
    assert spec.load_id not in staging_tables(pg_dsn).values() and spec.load_id not in staging_tables(
        reporting_dsn).values(), "every database's staging is dropped after the commit"

    # From a shell, the servers are found as the DAGs find them: Airflow connections alone
    # (the stack's, in the environment; "reporting" is the second database's under the
    # name this load gives it), no TWOPHASE_* variable.
    airflow_only = {k: v for k, v in os.environ.items() if not k.startswith("TWOPHASE_")}
    airflow_only["AIRFLOW_CONN_REPORTING"] = os.environ["AIRFLOW_CONN_TWOPHASE_REPORTING"]
    checked = subprocess.run([sys.executable, "-m", "twophase_airflow", "verify", "--pipeline", spec.pipeline],
                             env=airflow_only, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
    assert f"ok   COMMITTED" in checked.stdout and spec.load_id in checked.stdout, checked.stdout
    assert "1 loads checked, 0 violations" in checked.stdout, checked.stdout


def test_a_gate_rollback_leaves_nothing_in_any_target(spark, txlog, pg_dsn, kafka_bootstrap, reporting_dsn, many,
                                                        many_conns):
    conns = many_conns
    spec = many_spec(many, f"{many['topic']}-gate")
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, many_frames(spark, ROWS))
    decided = coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS + 1)])
    assert decided.state == State.ABORTING and f"{ROWS} rows, below the minimum of {ROWS + 1}" in decided.reason
    outcomes = {o.participant: o for o in coordinator.rollback(txlog, conns, spec.load_id)}
    assert outcomes["postgres"].counts["staged_rows_dropped"] == ROWS + 1  # refused by the rules: never readied
    assert outcomes["postgres@reporting"].counts["staged_rows_dropped"] == ROWS
    assert outcomes[f"iceberg:{many['iceberg']}"].counts["staged_files_deleted"] > 0
    assert txlog.get(spec.load_id).state == State.ABORTED
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == dict.fromkeys(TARGETS, 0)
    assert load_snapshots(many["iceberg"], spec.load_id) == [], "no snapshot of an aborted load"
    assert iceberg_leftovers(many["iceberg"], spec.load_id) == [], "no data file of an aborted load"
    assert not [g for g in prepared_gids(pg_dsn) + prepared_gids(reporting_dsn) if spec.load_id in g]
    assert spec.load_id not in staging_tables(pg_dsn).values()
    assert spec.load_id not in staging_tables(reporting_dsn).values()
    [finding] = verify(txlog, conns, [txlog.get(spec.load_id)])
    assert finding.ok, finding


def test_a_frame_the_job_did_not_return_is_refused_before_anything_is_staged(spark, txlog, pg_dsn, many,
                                                                              many_conns):
    conns = many_conns
    spec = many_spec(many, f"{many['topic']}-noframe")
    coordinator.begin(txlog, spec)
    with pytest.raises(ValueError, match=f"table {many['summary']} loads the job's frame 'summary', which the job "
                                         r"did not return \(it returned \[''\]\)"):
        coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 10))
    assert spec.load_id not in staging_tables(pg_dsn).values()
    coordinator.vote(txlog, conns, spec.load_id)
    coordinator.rollback(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTED
