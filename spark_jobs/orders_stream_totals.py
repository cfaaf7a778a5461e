"""Prepare job of the streaming example: the order events of one load's range of the topic
orders-events -> totals per customer for that load.

Input: exactly the offsets the load's source fixed at begin (read_source: Spark's Kafka
batch source, read_committed), each record's value an order as JSON
({"order_id", "customer_id", "amount", "ordered_at"}; orders_sample.stream). Every record
is accounted for: an order, or a rejected record (its reason counted and the record kept
in the quarantine: a value that is not such JSON, a missing customer, an amount that is
not a positive number).

Output: one row per customer of the load (customer_id, orders, revenue, first_order_at,
last_order_at) and metrics with input_lines = orders + rejected_lines.

Run by the DAG: spark-submit orders_stream_totals.py --load-id <load id>
"""

from __future__ import annotations

from pyspark.sql import functions as F

from twophase.spark.job import Output, read_source, run

ORDER = "order_id string, customer_id string, amount string, ordered_at string"


def build(spark, spec) -> Output:
    records = read_source(spark, spec).select(F.col("value").cast("string").alias("line"), "partition", "offset")
    parsed = records.withColumn("o", F.from_json("line", ORDER))
    amount = F.expr("try_cast(o.amount as decimal(12, 2))")
    at = F.expr("try_cast(o.ordered_at as timestamp)")
    judged = parsed.withColumn("reason", F.when(F.col("o").isNull(), "not_json")
                               .when(F.col("o.customer_id").isNull() | (F.col("o.customer_id") == ""),
                                     "missing_customer")
                               .when(amount.isNull() | (amount <= 0), "amount_not_positive")
                               .when(at.isNull(), "bad_timestamp")) \
        .withColumn("amount", amount).withColumn("at", at).cache()
    orders = judged.where("reason is null")
    totals = orders.groupBy(F.col("o.customer_id").alias("customer_id")).agg(
        F.count(F.lit(1)).cast("int").alias("orders"), F.sum("amount").cast("decimal(14, 2)").alias("revenue"),
        F.min("at").alias("first_order_at"), F.max("at").alias("last_order_at"))
    counts = judged.groupBy("reason").count().collect()
    rejected = sum(r["count"] for r in counts if r["reason"] is not None)
    valid = sum(r["count"] for r in counts if r["reason"] is None)
    rejects = judged.where("reason is not null").select(
        "reason", F.format_string("partition %d offset %d", "partition", "offset").alias("source"),
        F.lit("").alias("detail"), F.col("line").alias("content"))
    return Output(totals, metrics={"input_lines": valid + rejected, "orders": valid, "rejected_lines": rejected},
                  rejects=rejects)


if __name__ == "__main__":
    run(build)
