"""The events pipeline of the source tests: order events on a Kafka topic, read through a
Kafka source, loaded into a Postgres table (keyed by event id: a second copy of an event
would be refused) and, optionally, an output topic and an Iceberg table (test_source_loads.py,
source_driver.py)."""

from __future__ import annotations

from pyspark.sql import functions as F

from twophase.ids import load_id_for
from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.sources import Range
from twophase.spec import LoadSpec


def spec_for(events: dict, run: str, source, all_targets: bool = True) -> LoadSpec:
    """The events pipeline's load: the table, and (`all_targets`) the output topic and the
    Iceberg table (events["iceberg"], made by the first load)."""
    lake = IcebergTarget(events["iceberg"], columns={"event_id": "string", "customer_id": "string", "amount": "int"})
    targets = (PostgresTarget(events["table"]),) + ((KafkaTarget(events["output"], key_column="event_id"), lake)
                                                     if all_targets else ())
    return LoadSpec(load_id=load_id_for(events["pipeline"], run), pipeline=events["pipeline"], run_id=run,
                    targets=targets, source=source)


def job(spark, load, conns):
    """The prepare job: the load's range of the topic, one row per event."""
    raw = load.spec().source.frame(spark, Range.from_json(load.source_range), conns)
    event = F.from_json(F.col("value").cast("string"), "event_id string, customer_id string, amount int")
    return raw.select(event.alias("e")).select("e.event_id", "e.customer_id", "e.amount")


def load_new_events(log, conns, spark, events: dict, run: str, source) -> State:
    """One whole load of what is new (begin, prepare, vote, commit), as a DAG run does;
    NothingToRead when there is nothing new."""
    spec = spec_for(events, run, source)
    load = coordinator.begin(log, spec, conns, empty="skip")
    coordinator.prepare(log, conns, spec.load_id, job(spark, load, conns))
    if coordinator.vote(log, conns, spec.load_id).state == State.COMMITTING:
        coordinator.commit(log, conns, spec.load_id)
    else:
        coordinator.rollback(log, conns, spec.load_id)
    return log.get(spec.load_id).state
