"""Prepare job of the streaming example: the order events of one load's range of the topic
orders-events -> totals per customer for that load.

Input: exactly the offsets the load's source fixed at begin (read_source: Spark's Kafka
batch source, read_committed), each record's value an order as JSON
({"order_id", "customer_id", "amount", "ordered_at"}; orders_sample.stream). Every record
is accounted for: an order, or a rejected record (its reason counted and the record kept
in the quarantine: a value that is not such JSON, a missing customer, an amount that is
not a positive number).

Output: one row per customer of the load (customer_id, orders, revenue, first_order_at,
last_order_at) and metrics with input_lines = orders + rejected_lines and
rejected_by_reason ({reason: records}).

Run by the DAG: spark-submit orders_stream_totals.py --load-id <load id>
"""

from __future__ import annotations

from pyspark.sql import functions as F

import order_sql
from twophase.spark.job import Output, read_source, run
from twophase.spark.readers import barrier

ORDER = "order_id string, customer_id string, amount string, ordered_at string"


def judged(records, java: bool = True):
    """Each record with the reason it is rejected (null: an order) and the order's fields.
    A record whose value is plainly a valid order event is read by the fast path in Java
    (order_sql.with_fast_event, where the session registers it and `java`), every other by
    from_json and Spark's casts, with the same values and reasons."""
    fast = java and order_sql.in_java(records.sparkSession, "the streaming job parses every record with from_json")
    if fast:  # the Java function once per record (a barrier), from_json only where it gave null
        records = barrier(order_sql.with_fast_event(records, "value"))
    # A value that is not a JSON object gets the whole of it in _corrupt_record (its other
    # fields null), an empty one a null: both are rejected as not_json.
    o = F.from_json(F.col("value").cast("string"), f"{ORDER}, _corrupt_record string",
                    {"columnNameOfCorruptRecord": "_corrupt_record"})
    parsed = records.select(F.col("value").cast("string").alias("line"), "partition", "offset",
                            (F.when(F.col("_fast").isNull(), o) if fast else o).alias("o"),
                            *(["_fast"] if fast else []))
    amount = F.expr("try_cast(o.amount as decimal(12, 2))")
    at = F.expr("try_cast(o.ordered_at as timestamp)")
    reason = (F.when(F.col("o").isNull() | F.col("o._corrupt_record").isNotNull(), "not_json")
              .when(F.col("o.customer_id").isNull() | (F.col("o.customer_id") == ""), "missing_customer")
              .when(amount.isNull() | (amount <= 0), "amount_not_positive")
              .when(at.isNull(), "bad_timestamp"))
    values = {"reason": reason, "customer_id": F.col("o.customer_id"), "amount": amount, "at": at}
    if fast:
        event = {"reason": F.lit(None).cast("string"), "customer_id": F.col("_fast.customer_id"),
                 "amount": F.col("_fast.amount"), "at": F.timestamp_micros("_fast.ordered_at_micros")}
        values = {name: F.when(F.col("_fast").isNotNull(), event[name]).otherwise(slow)
                  for name, slow in values.items()}
    return parsed.select("line", "partition", "offset", *(v.alias(k) for k, v in values.items()))


def build(spark, spec) -> Output:
    records = judged(read_source(spark, spec))
    # One pass over the range: totals per customer of the orders, a count per reason of the
    # rest, kept (small: a row per customer and one per reason) for the counts and the staging.
    summary = records.groupBy("reason", F.when(F.col("reason").isNull(), F.col("customer_id")).alias("customer_id")) \
        .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("revenue"), F.min("at").alias("first_order_at"),
             F.max("at").alias("last_order_at")).persist()
    counts = {r["reason"]: r["n"] for r in summary.groupBy("reason").agg(F.sum("n").alias("n")).collect()}
    valid = counts.pop(None, 0)
    rejected = sum(counts.values())
    totals = summary.where("reason is null").select(
        "customer_id", F.col("n").cast("int").alias("orders"), F.col("revenue").cast("decimal(14, 2)").alias("revenue"),
        "first_order_at", "last_order_at")
    # The rejected records are read again only when there are some: the range is fixed, so
    # the second read returns the same records.
    rejects = None if not rejected else records.where("reason is not null").select(
        "reason", F.format_string("partition %d offset %d", "partition", "offset").alias("source"),
        F.lit("").alias("detail"), F.col("line").alias("content"))
    return Output(totals, metrics={"input_lines": valid + rejected, "orders": valid, "rejected_lines": rejected,
                                   "rejected_by_reason": counts},
                  rejects=rejects)


if __name__ == "__main__":
    run(build)
