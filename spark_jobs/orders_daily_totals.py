"""Prepare job of the example pipeline: order events of one day -> totals per customer.

Input (from the load's `input`, logged by the DAG's begin task):
    path     the day's landing folder of JSON lines (one order per line)
    date     the day, YYYY-MM-DD
    rejects  where rejected lines are kept for people to inspect

A line is valid when it is a JSON object with: order_id (non-empty string), customer_id
(a string like c0001234), amount (a number >= 0) and ordered_at (an ISO-8601 timestamp
on `date`, UTC). Blank lines are skipped. Every other line is rejected: counted, kept
out of the load and written, with its reason, to `rejects` as JSON lines.

Output: one row per customer of the day (customer_id, day, orders, revenue,
first_order_at, last_order_at), staged to Postgres and Kafka by the twophase frame,
with metrics input_lines, rejected_lines and rejected_by_reason for the vote's gates.

Run by the DAG: spark-submit orders_daily_totals.py --load-id <load id>
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from twophase.spark_job import Output, run

log = logging.getLogger("orders_daily_totals")

ORDER = T.StructType([
    T.StructField("order_id", T.StringType()),
    T.StructField("customer_id", T.StringType()),
    # A double, not a decimal: Spark reads the string "36,58" into a decimal as 3658 (locale
    # grouping), while a double field rejects any string. Amounts are rounded to cents below.
    T.StructField("amount", T.DoubleType()),
    T.StructField("ordered_at", T.TimestampType()),
    T.StructField("_corrupt", T.StringType()),
])
REASONS = {
    "not_json": "not a JSON object",
    "wrong_type": "a field has the wrong type (amount must be a number, ordered_at an ISO-8601 timestamp)",
    "no_order_id": "order_id missing or empty",
    "bad_customer": "customer_id missing or not like c0001234",
    "no_amount": "amount missing",
    "negative_amount": "amount is negative",
    "no_time": "ordered_at missing",
    "other_day": "ordered_at is not on the load's date",
}


def input_folder_exists(spark: SparkSession, path: str) -> bool:
    """Through Hadoop's file system API, so HDFS, S3 and local paths all work."""
    jvm_path = spark._jvm.org.apache.hadoop.fs.Path(path)
    return jvm_path.getFileSystem(spark._jsc.hadoopConfiguration()).exists(jvm_path)


def classify(lines: DataFrame, day: str) -> DataFrame:
    """Parsed orders with a `reason` column: null for valid lines, else a key of REASONS."""
    parsed = lines.select(
        F.col("value").alias("line"),
        F.from_json("value", ORDER, {"columnNameOfCorruptRecord": "_corrupt", "mode": "PERMISSIVE",
                                     "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss[.SSS]XXX"}).alias("o"),
        F.get_json_object("value", "$").isNotNull().alias("is_json"),
    ).select("line", "is_json", "o.*").withColumn("amount", F.round("amount", 2).cast("decimal(12,2)"))
    reason = (F.when(~F.col("is_json") | ~F.trim("line").startswith("{"), "not_json")
              .when(F.col("_corrupt").isNotNull(), "wrong_type")
              .when(F.col("order_id").isNull() | (F.col("order_id") == ""), "no_order_id")
              .when(F.col("customer_id").isNull() | ~F.col("customer_id").rlike(r"^c[0-9]{1,12}$"), "bad_customer")
              .when(F.col("amount").isNull(), "no_amount")
              .when(F.col("amount") < 0, "negative_amount")
              .when(F.col("ordered_at").isNull(), "no_time")
              .when(F.to_date("ordered_at") != F.lit(day).cast("date"), "other_day"))
    return parsed.withColumn("reason", reason)


def totals(valid: DataFrame, day: str) -> DataFrame:
    return valid.groupBy("customer_id").agg(
        F.count(F.lit(1)).cast("int").alias("orders"),
        F.sum("amount").cast("decimal(14,2)").alias("revenue"),
        F.min("ordered_at").alias("first_order_at"),
        F.max("ordered_at").alias("last_order_at"),
    ).select("customer_id", F.lit(day).cast("date").alias("day"), "orders", "revenue",
             "first_order_at", "last_order_at")


def build(spark: SparkSession, spec) -> Output:
    path, day, rejects = spec.input["path"], spec.input["date"], spec.input["rejects"]
    if not input_folder_exists(spark, path):
        raise FileNotFoundError(f"input folder {path} does not exist: no order events landed for {day}")
    lines = spark.read.text(path).where(F.trim("value") != "")
    orders = classify(lines, day).cache()
    counts = orders.groupBy("reason").count().collect()
    by_reason = {REASONS[r["reason"]] if r["reason"] else "valid": r["count"] for r in counts}
    input_lines = sum(by_reason.values())
    rejected = input_lines - by_reason.get("valid", 0)
    if input_lines == 0:
        log.warning("input folder %s holds no order lines: the load has 0 rows (the min_rows gate decides "
                    "whether an empty day commits)", path)
    log.info("read %d lines from %s: %d valid, %d rejected", input_lines, path, input_lines - rejected, rejected)
    for why, n in sorted(by_reason.items()):
        if why != "valid":
            log.info("  rejected %d: %s", n, why)
    if rejected:
        (orders.where(F.col("reason").isNotNull())
         .select("line", F.create_map(*[F.lit(x) for kv in REASONS.items() for x in kv])[F.col("reason")]
                 .alias("reason"))
         .coalesce(1).write.mode("overwrite").json(rejects))
        log.info("rejected lines kept in %s", rejects)
    metrics = {"input_lines": input_lines, "rejected_lines": rejected,
               "rejected_by_reason": {k: v for k, v in by_reason.items() if k != "valid"}}
    return Output(totals(orders.where(F.col("reason").isNull()), day), metrics)


if __name__ == "__main__":
    run(build)
