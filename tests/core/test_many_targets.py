"""One load, many targets: three tables over two databases (two of them fed by different
frames of the job) and two topics, committed or rolled back as one.

Counts are read back by independent readers (a fresh connection per database counting
rows by load_id, a read_committed consumer counting records by their load_id header),
never from the log.
"""

from __future__ import annotations

import json

import pytest

from support import REPORTING, make_df, many_frames, many_seen, many_spec, read_topic
from twophase import coordinator
from twophase.participants import participant_name
from twophase.participants.postgres import prepared_gids, staging_tables
from twophase.states import State
from twophase.verify import verify
from twophase.voting import MinRows

ROWS = 400


def test_three_tables_in_two_databases_and_two_topics_commit_as_one(spark, txlog, pg_dsn, kafka_bootstrap,
                                                                     reporting_dsn, many, many_conns):
    conns = many_conns
    spec = many_spec(many, many["topic"])
    assert [p.name for p in conns.participants(spec)] == ["postgres", participant_name("postgres", REPORTING),
                                                          "kafka"]
    coordinator.begin(txlog, spec)
    votes = coordinator.prepare(txlog, conns, spec.load_id, many_frames(spark, ROWS))
    assert votes["postgres"].counts == {many["orders"]: ROWS, many["summary"]: 1}
    assert votes["postgres@reporting"].counts == {many["reporting"]: ROWS}
    assert votes["kafka"].counts == {many["topic"]: ROWS, many["topic2"]: ROWS}
    # Two prepared transactions, one per database, and nothing visible anywhere yet.
    gids = {v.committable["gid"] for v in votes.values() if "gid" in v.committable}
    assert len(gids) == 2 and gids <= set(prepared_gids(pg_dsn)) | set(prepared_gids(reporting_dsn))
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == dict.fromkeys(
        ("orders", "summary", "reporting", "topic", "topic2"), 0)

    assert coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS)]).state == State.COMMITTING
    outcomes = coordinator.commit(txlog, conns, spec.load_id)
    assert [o.participant for o in outcomes] == ["kafka", "postgres", "postgres@reporting"], "may-fail commits first"
    assert txlog.get(spec.load_id).state == State.COMMITTED
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == {
        "orders": ROWS, "summary": 1, "reporting": ROWS, "topic": ROWS, "topic2": ROWS}
    # The second topic's records hold only its value columns.
    record = next(m for m in read_topic(kafka_bootstrap, many["topic2"]))
    assert set(json.loads(record.value())) == {"customer_id", "orders"}
    [finding] = verify(txlog, conns, [txlog.get(spec.load_id)])
    assert finding.ok and finding.visible == {many["orders"]: ROWS, many["summary"]: 1, many["reporting"]: ROWS,
                                              many["topic"]: ROWS, many["topic2"]: ROWS}, finding
    assert spec.load_id not in staging_tables(pg_dsn).values() and spec.load_id not in staging_tables(
        reporting_dsn).values(), "every database's staging is dropped after the commit"


def test_a_gate_rollback_leaves_nothing_in_any_target(spark, txlog, pg_dsn, kafka_bootstrap, reporting_dsn, many,
                                                        many_conns):
    conns = many_conns
    spec = many_spec(many, f"{many['topic']}-gate")
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, many_frames(spark, ROWS))
    decided = coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS + 1)])
    assert decided.state == State.ABORTING and f"{ROWS} rows, below the minimum of {ROWS + 1}" in decided.reason
    outcomes = {o.participant: o for o in coordinator.rollback(txlog, conns, spec.load_id)}
    assert outcomes["postgres"].counts["prepared_rows_discarded"] == ROWS + 1
    assert outcomes["postgres@reporting"].counts["prepared_rows_discarded"] == ROWS
    assert txlog.get(spec.load_id).state == State.ABORTED
    assert many_seen(many, pg_dsn, reporting_dsn, kafka_bootstrap, spec.load_id) == dict.fromkeys(
        ("orders", "summary", "reporting", "topic", "topic2"), 0)
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
