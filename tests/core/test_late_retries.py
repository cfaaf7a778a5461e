"""Phase-2 steps retried after the load already ended change nothing.

test_load_cycle.py covers a participant's commit retried after the commit, and abort
refused after it. This adds the other side:

- after a rollback, each participant's abort retried again is harmless (Postgres says
  ALREADY_DONE and discards nothing more; Kafka fences again), the coordinator's rollback
  is a no-op, and a late commit (a retried task of the other branch) is refused: nothing
  reaches the target table or topic, the staged records stay unpromoted in staging;
- after a commit, a late rollback is refused and the load stays COMMITTED and visible.
"""

from __future__ import annotations

import pytest

from support import header, make_df, make_spec, participants, read_topic, topic_of
from twophase.log import StateConflict
from twophase.protocol import coordinator
from twophase.protocol.outcome import Kind
from twophase.protocol.states import State
from support import count_table_rows
from twophase.ops.verify import verify
from twophase.protocol.voting import MinRows

ROWS = 300


def test_abort_retried_after_rollback_and_late_commit_refused(spark, txlog, conns, target):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    assert coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS + 1)]).state == State.ABORTING
    coordinator.rollback(txlog, conns, spec.load_id)
    history = txlog.history(spec.load_id)
    assert [t.to_state for t in history][-2:] == ["ABORTING", "ABORTED"]

    parts, votes = participants(spec, conns), txlog.votes(spec.load_id)
    for _ in range(2):
        postgres = parts["postgres"].abort(votes["postgres"])
        assert (postgres.kind, postgres.counts) == (
            Kind.ALREADY_DONE, {"prepared_transaction": "none", "staged_rows_dropped": 0}), postgres
        # Fencing cannot tell a first abort from a repeated one; it must just succeed again.
        assert parts["kafka"].abort(votes["kafka"]).ok
    assert coordinator.rollback(txlog, conns, spec.load_id) == []
    with pytest.raises(StateConflict, match="is ABORTED"):
        coordinator.commit(txlog, conns, spec.load_id)

    assert txlog.get(spec.load_id).state == State.ABORTED
    assert txlog.history(spec.load_id) == history, "late retries must not touch the log"
    assert count_table_rows(conns.pg_dsn, target["table"], spec.load_id) == 0
    assert read_topic(conns.kafka_bootstrap, target["topic"], "read_uncommitted") == [], \
        "the target topic was never written to, not even in an aborted transaction"
    staged = read_topic(conns.kafka_bootstrap, topic_of(spec).staging_topic)
    assert [header(m, "load_id") for m in staged] == [spec.load_id] * ROWS, "staged records stay, unpromoted"
    [finding] = verify(txlog, conns, [txlog.get(spec.load_id)])
    assert finding.ok, finding


def test_late_rollback_after_commit_is_refused(spark, txlog, conns, target):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, spec.load_id)
    history = txlog.history(spec.load_id)

    with pytest.raises(StateConflict, match="is COMMITTED"):
        coordinator.rollback(txlog, conns, spec.load_id)
    assert coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(ROWS + 1)]).state == State.COMMITTED, \
        "a late vote does not change a decision"

    assert txlog.get(spec.load_id).state == State.COMMITTED
    assert txlog.history(spec.load_id) == history
    assert count_table_rows(conns.pg_dsn, target["table"], spec.load_id) == ROWS
    assert len(read_topic(conns.kafka_bootstrap, target["topic"])) == ROWS
    [finding] = verify(txlog, conns, [txlog.get(spec.load_id)])
    assert finding.ok, finding
