"""Loads logged by the release before many targets still recover after the upgrade.

That release logged a load's planned participants as {"postgres": {table...}, "kafka":
{topic...}}, its votes without per-target counts or summary, Kafka's vote data for one
topic ({"topic", "staging_topic", "ranges", ...}) and no per-target expected rows. Here a
load is staged by today's code, its log rows are rewritten to exactly that form (as if an
old prepare had written them), and today's recovery must finish it: commit a decided one,
presume abort an undecided one, with `verify` passing on the targets.
"""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg2
import pytest

from support import count_table_rows, make_df, make_spec, read_topic, table_of, topic_of
from twophase.ops import recovery
from twophase.ops.verify import verify
from twophase.protocol import coordinator
from twophase.protocol.states import State

ROWS = 300
OLD_TABLE_KEYS = ("table", "mode", "replace_where")
OLD_TOPIC_KEYS = ("topic", "key_column", "staging_topic", "partitions", "replication_factor",
                  "staging_retention_ms", "transaction_timeout_ms", "headers")


def _as_logged_by_the_old_release(txlog, conns, pg_dsn: str, spec) -> None:
    """The old release's prepare held the prepared transaction itself (today the vote's
    ready() takes it), and logged neither names nor per-target counts."""
    load = txlog.get(spec.load_id)
    [postgres] = [p for p in conns.participants(load.spec(), load.attempt) if p.name == "postgres"]
    txlog.record_vote(spec.load_id, postgres.ready(txlog.votes(spec.load_id)["postgres"]))
    table, topic = table_of(spec), topic_of(spec)
    participants = {"postgres": {k: getattr(table, k) for k in OLD_TABLE_KEYS},
                    "kafka": {k: getattr(topic, k) for k in OLD_TOPIC_KEYS}}
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("update twophase.loads set participants = %s, expected = null where load_id = %s",
                    (json.dumps(participants), spec.load_id))
        cur.execute("select participant, detail from twophase.votes where load_id = %s", (spec.load_id,))
        for participant, detail in cur.fetchall():
            if participant == "kafka":
                [copy] = detail["topics"]
                detail = {**{k: copy[k] for k in ("topic", "staging_topic", "ranges", "attempts", "checksum")},
                          "max_message_bytes": detail["max_message_bytes"]}
            else:
                detail = {k: detail[k] for k in ("gid", "table", "mode", "deleted")}
            cur.execute("update twophase.votes set detail = %s, counts = null, summary = '' "
                        "where load_id = %s and participant = %s", (json.dumps(detail), spec.load_id, participant))


@pytest.mark.parametrize("decided, final", [(True, State.COMMITTED), (False, State.ABORTED)])
def test_a_load_logged_by_the_old_release_recovers(spark, txlog, conns, pg_dsn, target, decided, final):
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, ROWS))
    _as_logged_by_the_old_release(txlog, conns, pg_dsn, spec)
    load = txlog.get(spec.load_id)
    assert set(load.participants) == {"postgres", "kafka"} and load.expected is None
    if decided:  # the old vote task decided COMMIT, then the commit task crashed
        assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING

    actions = [a for a in recovery.recover(txlog, conns, deadline=timedelta(0), pipeline=spec.pipeline) if a.load_id == spec.load_id]
    assert actions and actions[0].action in ("commit re-driven", "presumed abort"), actions
    load = txlog.get(spec.load_id)
    assert load.state == final, load.reason
    expected = ROWS if final == State.COMMITTED else 0
    assert count_table_rows(pg_dsn, target["table"], spec.load_id) == expected
    assert len(read_topic(conns.kafka_bootstrap, target["topic"])) == expected
    [finding] = verify(txlog, conns, [load])
    assert finding.ok and finding.visible == {target["table"]: expected, target["topic"]: expected}, finding
