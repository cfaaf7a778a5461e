"""A tiny prepare job through the real frame (twophase.spark.job.run): 20 rows for a test's
table and topic (support.make_spec's targets). The tests that spark-submit run it."""

from twophase.spark.job import Output, run


def build(spark, spec):
    from pyspark.sql import functions as F

    df = spark.range(20, numPartitions=2).select(
        F.format_string("c%06d", F.col("id")).alias("customer_id"), F.lit("2026-11-20").cast("date").alias("day"),
        (F.col("id") % 7 + 1).cast("int").alias("orders"), (F.col("id") / 100).cast("decimal(12,2)").alias("revenue"),
        F.lit(None).cast("string").alias("note"))
    return Output(df, {"input_lines": 20, "rejected_lines": 0})


if __name__ == "__main__":
    run(build)
