"""The streaming example end to end (dags/orders_stream_totals.py): order events produced to
orders-events; a run loads exactly the events after the last committed load into the
table, the topic and the Iceberg table; the events on the topic, read independently, equal
the committed loads' totals, and the pipeline's consumer group shows the last committed
end; a run with nothing new is green without a load. (Loads that
continue each other, a rolled back one's events read again: tests/core/test_source_loads.py.)"""

from __future__ import annotations

import json
from collections import Counter

import psycopg2
import pytest
from confluent_kafka import Consumer, TopicPartition

from orders_sample.stream import TOPIC, produce
from support import count_iceberg_rows, header, read_topic, wait_settled
from twophase.log import PostgresLog
from twophase.sources import Range

pytestmark = pytest.mark.slow
DAG_ID = "orders_stream_totals"


def committed_loads(pg_dsn):
    return [x for x in PostgresLog(pg_dsn).recent(10_000, DAG_ID) if x.state.value == "COMMITTED"]


def totals(pg_dsn, load_ids) -> Counter:
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        cur.execute("select customer_id, sum(orders) from analytics.customer_stream_totals "
                    "where load_id = any(%s) group by customer_id", (list(load_ids),))
        return Counter({c: int(n) for c, n in cur.fetchall()})


def test_a_run_loads_the_new_events_exactly_once_and_one_with_nothing_new_loads_nothing(run_dag, pg_dsn,
                                                                                         kafka_bootstrap):
    before = {x.load_id for x in committed_loads(pg_dsn)}
    produce(kafka_bootstrap, TOPIC, rate=10_000, count=300, progress=lambda _: None)
    wait_settled(kafka_bootstrap, TOPIC)  # its last transaction's markers written: the events are readable
    run = run_dag({}, dag_id=DAG_ID)
    assert run.state == "success", run.output[-4000:]
    [load] = [x for x in committed_loads(pg_dsn) if x.load_id not in before]
    assert "source: kafka:default/orders-events#orders_stream_totals:" in run.task_log("begin")
    assert ("Java functions twophase_example_fast_order, twophase_example_fast_event registered from"
            in run.task_log("prepare")), "the records were not read by the fast path"
    assert load.metrics["orders"] >= 300 and load.metrics["rejected_lines"] == 0, load.metrics
    assert Range.from_json(load.source_range).records >= load.metrics["orders"]
    # Its records in the output topic and its rows in Iceberg: one per customer.
    customers = len(totals(pg_dsn, [load.load_id]))
    out = [m for m in read_topic(kafka_bootstrap, "customer-stream-totals") if header(m, "load_id") == load.load_id]
    assert len(out) == customers == count_iceberg_rows("analytics.customer_stream_totals", load.load_id)
    # Kafka's own tools see where the pipeline got to: its group's offsets, committed with the output.
    fixed = Range.from_json(load.source_range).position["partitions"]
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": DAG_ID})
    try:
        shown = consumer.committed([TopicPartition(TOPIC, int(p)) for p in fixed], timeout=30)
    finally:
        consumer.close()
    assert {str(tp.partition): tp.offset for tp in shown} == {p: end for p, (_, end) in fixed.items()}

    # Nothing new: green, and no load.
    run = run_dag({}, dag_id=DAG_ID)
    assert run.state == "success", run.output[-4000:]
    assert "nothing to do: kafka:default/orders-events#orders_stream_totals has nothing new" in run.task_log("begin")
    assert len(committed_loads(pg_dsn)) == len(before) + 1

    # Every event on the topic, read independently, is in exactly one committed load's totals.
    events = Counter(json.loads(m.value())["customer_id"] for m in read_topic(kafka_bootstrap, TOPIC))
    assert totals(pg_dsn, [x.load_id for x in committed_loads(pg_dsn)]) == events
