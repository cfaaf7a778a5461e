"""Two loads in flight at once into the same table, topic and staging topic stay apart.

Loads A and B (different load ids, different days so their rows never collide on the
table's key) are prepared concurrently, from two driver threads sharing the Spark session
as two DAG runs would: both are PREPARED at the same time, both Postgres transactions
prepared, both loads' records in the one staging topic. Then:

- A commits while B is still prepared, then B is rolled back: the table and the topic
  show exactly A's rows and records (each key once), none of B's; B's staged records are
  never promoted; B's prepared transaction is gone.
- both commit: each load shows exactly its own rows and records, nothing else.

verify passes for both loads in both cases.
"""

from __future__ import annotations

import threading
from collections import Counter

import psycopg2

from support import header, make_df, make_spec, read_topic, topic_of
from twophase.ops.verify import verify
from twophase.participants.postgres import is_prepared, staging_tables
from twophase.protocol import coordinator
from twophase.protocol.outcome import Kind
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows

ROWS = {"A": 3000, "B": 2000}
DAY = {"A": "2026-11-20", "B": "2026-11-21"}
BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"
TRICKLE_ROWS, TRICKLE_PAUSE_S = 100, 0.1  # A stages over 3 s, B over 2 s


def _prepare_both_at_once(spark, txlog, conns, target):
    """Begin A and B, run both prepares concurrently; return their specs once both are PREPARED."""
    specs = {name: make_spec(target, run_id=f"{target['topic']}-{name}") for name in ROWS}
    assert specs["A"].load_id != specs["B"].load_id
    assert topic_of(specs["A"]).staging_topic == topic_of(specs["B"]).staging_topic
    for spec in specs.values():
        coordinator.begin(txlog, spec)
    # One partition each, so both Spark jobs run at once on the two cores (Spark's FIFO
    # scheduler would run one job's tasks first if each had more tasks than there are
    # cores), and rows that trickle in small batches: both loads stage over the same
    # seconds, and their records interleave in the staging topic.
    dfs = {name: _trickling(make_df(spark, ROWS[name], partitions=1, day=DAY[name])) for name in ROWS}
    errors = []

    def prepare(name):
        try:
            coordinator.prepare(txlog, conns, specs[name].load_id, dfs[name])
        except BaseException as exc:
            errors.append((name, exc))
    threads = [threading.Thread(target=prepare, args=(name,)) for name in ROWS]
    batch_size = spark.conf.get(BATCH_CONF)
    spark.conf.set(BATCH_CONF, str(TRICKLE_ROWS))
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        spark.conf.set(BATCH_CONF, batch_size)
    assert not errors, errors
    assert _staged_ranges_interleave(txlog, specs), "the two loads did not stage at the same time"

    for name, spec in specs.items():
        assert txlog.get(spec.load_id).state == State.PREPARED
        votes = txlog.votes(spec.load_id)
        assert (votes["postgres"].count, votes["kafka"].count) == (ROWS[name], ROWS[name])
        assert not is_prepared(conns.pg_dsn, votes["postgres"].committable["gid"]), "prepare holds nothing"
    staged = Counter(header(m, "load_id") for m in read_topic(conns.kafka_bootstrap, topic_of(specs["A"]).staging_topic))
    assert staged == {specs[n].load_id: ROWS[n] for n in ROWS}, "both loads staged into the one staging topic"
    assert _rows_by_load(conns.pg_dsn, target["table"]) == {}, "prepared rows are not visible"
    assert read_topic(conns.kafka_bootstrap, target["topic"]) == []
    return specs


def _trickling(df):
    """The same rows, from a slow source: TRICKLE_ROWS at a time, with a pause before each."""
    def trickle(batches):
        import time

        for batch in batches:
            for start in range(0, batch.num_rows, TRICKLE_ROWS):
                time.sleep(TRICKLE_PAUSE_S)
                yield batch.slice(start, TRICKLE_ROWS)
    return df.mapInArrow(trickle, df.schema)


def _rows_by_load(dsn, table) -> dict[str, tuple[int, set, int]]:
    """load_id -> (rows, days, distinct customers)."""
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select load_id, count(*), array_agg(distinct day::text), count(distinct customer_id) "
                    f"from {table} group by load_id")
        return {lid: (n, set(days), customers) for lid, n, days, customers in cur.fetchall()}


def _records_by_load(bootstrap, topic) -> dict[str, tuple[int, int]]:
    """load_id -> (records, distinct keys), as a read_committed consumer sees the topic."""
    records: dict[str, list] = {}
    for msg in read_topic(bootstrap, topic):
        records.setdefault(header(msg, "load_id"), []).append(msg.key())
    return {lid: (len(keys), len(set(keys))) for lid, keys in records.items()}


def _staged_ranges_interleave(txlog, specs) -> bool:
    """True if some staging partition holds records of B inside A's staged offset range or
    the other way round (then the copy really had to skip the other load's records)."""
    a, b = (txlog.votes(specs[n].load_id)["kafka"].committable["topics"][0]["ranges"] for n in ("A", "B"))
    return any(p in b and a[p][0] <= b[p][1] and b[p][0] <= a[p][1] for p in a)


def test_one_commits_the_other_rolls_back(spark, txlog, conns, target):
    specs = _prepare_both_at_once(spark, txlog, conns, target)
    a, b = specs["A"].load_id, specs["B"].load_id
    b_gid = txlog.votes(b)["postgres"].committable["gid"]

    assert coordinator.vote(txlog, conns, a).state == State.COMMITTING
    decided = coordinator.vote(txlog, conns, b, rules=[MinRows(ROWS["B"] + 1)])
    assert decided.state == State.ABORTING
    outcomes = coordinator.commit(txlog, conns, a)  # B is still staged meanwhile
    assert [(o.participant, o.kind, o.counts.get("records", o.counts.get("rows"))) for o in outcomes] == [
        ("kafka", Kind.DONE, ROWS["A"]), ("postgres", Kind.DONE, ROWS["A"])]
    assert not is_prepared(conns.pg_dsn, b_gid), "B, refused by its rules, was never made ready: it held nothing"
    assert b in staging_tables(conns.pg_dsn).values()
    coordinator.rollback(txlog, conns, b)

    assert txlog.get(a).state == State.COMMITTED and txlog.get(b).state == State.ABORTED
    assert b not in staging_tables(conns.pg_dsn).values(), "the rolled-back load's staging is gone"
    assert _rows_by_load(conns.pg_dsn, target["table"]) == {a: (ROWS["A"], {DAY["A"]}, ROWS["A"])}
    assert _records_by_load(conns.kafka_bootstrap, target["topic"]) == {a: (ROWS["A"], ROWS["A"])}, \
        "exactly A's records, none of B's"
    findings = verify(txlog, conns, [txlog.get(a), txlog.get(b)])
    assert all(f.ok for f in findings), findings


def test_both_commit(spark, txlog, conns, target):
    specs = _prepare_both_at_once(spark, txlog, conns, target)
    a, b = specs["A"].load_id, specs["B"].load_id
    for load_id in (b, a):
        assert coordinator.vote(txlog, conns, load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, b)
    assert _records_by_load(conns.kafka_bootstrap, target["topic"]) == {b: (ROWS["B"], ROWS["B"])}
    assert _rows_by_load(conns.pg_dsn, target["table"]) == {b: (ROWS["B"], {DAY["B"]}, ROWS["B"])}
    coordinator.commit(txlog, conns, a)

    assert txlog.get(a).state == State.COMMITTED and txlog.get(b).state == State.COMMITTED
    assert _rows_by_load(conns.pg_dsn, target["table"]) == {
        a: (ROWS["A"], {DAY["A"]}, ROWS["A"]), b: (ROWS["B"], {DAY["B"]}, ROWS["B"])}
    assert _records_by_load(conns.kafka_bootstrap, target["topic"]) == {
        a: (ROWS["A"], ROWS["A"]), b: (ROWS["B"], ROWS["B"])}
    findings = verify(txlog, conns, [txlog.get(a), txlog.get(b)])
    assert all(f.ok for f in findings), findings
