"""Prepare job of the hourly example: the orders of one hour -> totals per customer.

Input (dags/orders_hourly_totals.py):
    the load's source: the day's landing folder of JSON lines, as the daily example reads
                it (an IntervalFolder, listed at begin)
    start, end  the hour, ISO instants: orders with start <= ordered_at < end are loaded
    rejects     where rejected lines are kept for people to inspect
The folder and `rejects` are storage URIs, as the daily job takes them; the rejects are
counted where they were written, after the write, as the daily job does.

The day's folder is listed, read, validated and de-duplicated by the daily job's own
functions (orders_daily_totals.py, rules in order_rules.py); this job keeps the hour's
orders and totals them per customer: (customer_id, hour, orders, revenue), which the
table customer_hourly_totals and the topic load.

Every line of the folder is counted once in the metrics:
    input_lines = orders + duplicate_lines + other_hours_lines + rejected_lines + blank_lines
- other_hours_lines: lines of valid orders of the day's other hours, neither loaded nor
  rejected here (their own hour's load loads them);
- rejected_lines: every rejected line of the folder: a line that is not a valid order has
  no hour to trust, so each hour's load counts it and the max_rejected_share gate judges
  the folder's share.

Run by the DAG: spark-submit orders_hourly_totals.py --load-id <load id>
"""

from __future__ import annotations

import logging
from datetime import datetime

from pyspark import cloudpickle
from pyspark.sql import functions as F

import orders_daily_totals as daily
from order_rules import REASONS
from twophase.spark.job import Output, run
from twophase.spark.readers import skipped_metrics

# Executors get the daily job's functions inside the pickled ones (as it does its rules).
cloudpickle.register_pickle_by_value(daily)

log = logging.getLogger("orders_hourly_totals")


def build(spark, spec) -> Output:
    path, rejects = daily.locations(spec)
    start, end = (datetime.fromisoformat(spec.input[k]) for k in ("start", "end"))
    listing = daily.listing_of(spec)
    skipped = skipped_metrics(spec, path)

    judged = daily.judge(daily.read_lines(spark, spec), start.date())
    per_order = daily.dedupe(judged.valid())
    in_hour = (F.col("ordered_at") >= F.lit(start)) & (F.col("ordered_at") < F.lit(end))
    customers = daily.customers_of(per_order.withColumn("in_hour", in_hour), "in_hour")
    agreed, hour = F.col("agreed"), F.col("in_hour")
    n, counts = daily.tally(judged, customers,
                            F.sum(F.when(agreed & hour, F.col("orders"))).alias("orders"),
                            F.sum(F.when(agreed & hour, F.col("copies") - F.col("orders"))).alias("duplicates"),
                            F.sum(F.when(agreed & ~hour, F.col("copies"))).alias("other_hours"),
                            F.sum(F.when(~agreed, F.col("copies"))).alias("conflicting"))
    counts = {key: c for key, (c, _) in counts.items()}

    by_reason = {REASONS[reason]: c for (verdict, reason), c in counts.items() if verdict == "rejected"}
    if n["conflicting"]:
        by_reason[REASONS["conflicting_order"]] = n["conflicting"]
    rejected, blank = sum(by_reason.values()), counts.get(("blank", None), 0)
    metrics = {
        "input_files": len(listing.read), "input_lines": sum(counts.values()), "orders": n["orders"] or 0,
        "duplicate_lines": n["duplicates"] or 0, "other_hours_lines": n["other_hours"] or 0,
        "rejected_lines": rejected, "rejected_by_reason": by_reason, "blank_lines": blank, **skipped,
    }
    log.info("read %d lines in %d files from %s: %d orders of %s .. %s loaded, %d lines of other hours, %d rejected, "
             "%d duplicate deliveries skipped, %d blank lines skipped", metrics["input_lines"], len(listing.read),
             path, metrics["orders"], start.isoformat(), end.isoformat(), metrics["other_hours_lines"], rejected,
             metrics["duplicate_lines"], blank)
    if rejected:
        daily.keep_rejects(spark, daily.rejects_of(judged, per_order, bool(n["conflicting"])), rejects, rejected)

    # revenue: decimal(22,2), the sum of the orders' cents (daily.totals), as the table's column holds it.
    per_customer = daily.totals(customers.where("in_hour"), start.date().isoformat()).select(
        "customer_id", F.lit(start).alias("hour"), "orders", "revenue")
    return Output(per_customer, metrics)


if __name__ == "__main__":
    run(build)
