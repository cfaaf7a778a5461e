"""Prepare job of the example pipeline: order events of one day -> totals per customer.

Input:
    the load's source: the day's landing folder of JSON lines (one order per line), an
             IntervalFolder whose listing (each file's URI, size and modification time)
             was fixed at begin; a file that changes or vanishes before the load read it
             fails the load (twophase/sources/files.py)
    date     the day, YYYY-MM-DD (the load's `input`, logged by the DAG's begin task)
    rejects  where rejected lines are kept for people to inspect (ditto)
The folder and `rejects` are storage URIs (file://, hdfs://, s3a://; a plain absolute path
is a local one), read and written through Hadoop's file systems, never joined with pathlib.

Every file and every line under the day's folder is accounted for:
- files: the folder's own files are read, except hidden ones (name starting with '_' or
  '.', Hadoop's mark of markers and files still being written); hidden files and files in
  subfolders are not read (the source lists them so), and each is reported with its path
  and size (metrics skipped_files, skipped_bytes, skipped_paths), so the vote's gate can
  refuse the day;
- lines: each line read is a valid order, a rejected line (its reason counted and the line
  kept in `rejects` with what is wrong with its value), a duplicate delivery of an order
  already loaded (counted, loaded once) or a blank line (counted);
- rejects: executors write them, so they are counted again where they were written, after
  the write; a count that differs from the lines the job rejected fails the load (a file://
  location on a cluster is each worker's own disk: the lines would stay there unseen).
The rules of a valid order are in order_rules.py (and docs/example.md); order_sql.py finds
the plainly valid lines in Spark, and check_line judges the rest (judge).

Output: the main frame, one row per customer of the day (customer_id, day, orders,
revenue, first_order_at, last_order_at), which the table customer_daily_totals and the
topic load; the frame "summary", one row for the day (day, orders, revenue, customers,
rejected_lines), which the table orders_daily_summary loads; and metrics with
input_lines = orders + duplicate_lines + rejected_lines + blank_lines. The twophase frame
stages them to every target in one load.

Run by the DAG: spark-submit orders_daily_totals.py --load-id <load id>
"""

from __future__ import annotations

import base64
import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

import pyarrow as pa
from pyspark import StorageLevel, cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import order_rules
import order_sql
from order_rules import REASONS, check_line
from order_sql import ORDER, ORDER_DDL, coded, customer_of
from twophase.spark.job import Output, read_source, run
from twophase.spark.readers import skipped_metrics
from twophase.spark.storage import storage_uri
from twophase.spec import SpecError

# Executors get the rules inside the pickled function: nothing to install on a cluster.
cloudpickle.register_pickle_by_value(order_rules)
cloudpickle.register_pickle_by_value(order_sql)

log = logging.getLogger("orders_daily_totals")

MAX_REVENUE = Decimal("999999999999.99")  # analytics.customer_daily_totals.revenue numeric(14, 2)
MAX_REVENUE_CENTS = int(MAX_REVENUE * 100)
MAX_REJECT_CHARS = 10_000  # a rejected line is kept up to this many characters
# Spark's error when an executor cannot find a file the driver listed; it names the file's URI.
_FILE_MISSING = re.compile(r"FILE_NOT_EXIST\] Encountered error while reading file (\S+)\. ")

CLASSIFIED = ("file string, verdict string, reason string, detail string, line string, line_base64 string, "
              f"line_bytes long, {ORDER_DDL}")
_CLASSIFIED_ARROW = pa.schema([
    ("file", pa.string()), ("verdict", pa.string()), ("reason", pa.string()), ("detail", pa.string()),
    ("line", pa.string()), ("line_base64", pa.string()), ("line_bytes", pa.int64()), ("order_id", pa.string()),
    ("customer_code", pa.int64()), ("cents", pa.int64()), ("ordered_at", pa.timestamp("us", "UTC")),
])


class RejectsNotKept(Exception):
    """The rejected lines found at the rejects location after the write are not the lines
    the job rejected."""


@dataclass(frozen=True)
class Listing:
    """The day folder's files the job reads (those it does not: readers.skipped_metrics)."""

    read: list[tuple[str, int]]          # (URI, bytes)


def listing_of(spec) -> Listing:
    """The files of the load's range, as its folder source listed them at begin."""
    return Listing([(uri, size) for uri, size, _ in spec.source_range["position"].get("files", [])])


def classify_partition(day: date):
    """The function mapInArrow runs on each partition of (raw line bytes, file)."""
    def classify(batches):
        for batch in batches:
            rows = {name: [] for name in _CLASSIFIED_ARROW.names}
            for raw, file in zip(batch.column("raw").to_pylist(), batch.column("file").to_pylist()):
                verdict = check_line(raw, day)
                kind = "blank" if verdict.blank else "valid" if verdict.order else "rejected"
                text = raw.decode("utf-8", "backslashreplace")
                exact = verdict.reason == "not_utf8"
                rows["file"].append(file)
                rows["verdict"].append(kind)
                rows["reason"].append(verdict.reason)
                rows["detail"].append(verdict.detail)
                rows["line"].append(None if kind == "blank" else text[:MAX_REJECT_CHARS])
                rows["line_base64"].append(base64.b64encode(raw).decode() if exact else None)
                rows["line_bytes"].append(len(raw))
                for name, value in zip(ORDER, coded(verdict.order) if verdict.order else (None,) * len(ORDER)):
                    rows[name].append(value)
            yield pa.RecordBatch.from_pydict(rows, schema=_CLASSIFIED_ARROW)
    return classify


def _fast_path(lines: DataFrame, day: date, java: bool = True) -> DataFrame:
    """(raw, file) lines with the ORDER columns: the order when order_sql's fast path finds
    the line plainly valid (in Spark's JVM: OrderLines.java, or its regular expression where
    the Java class cannot be registered or `java` is false), else nulls."""
    return order_sql.with_fast_order(lines, "raw", day, java)


def _judge(other: DataFrame, day: date) -> DataFrame:
    """check_line's verdict (Python, mapInArrow) of each (raw, file) line, as CLASSIFIED rows."""
    return other.select("raw", "file").mapInArrow(classify_partition(day), CLASSIFIED)


def classify(lines: DataFrame, day: date, java: bool = True) -> DataFrame:
    """Every (raw, file) line as a CLASSIFIED row: a line the fast path finds plainly
    valid is an order as it read it; every other line gets check_line's verdict. The
    verdicts the job counts (Judged) are these; this form keeps every line with it."""
    checked = _fast_path(lines, day, java)
    none = F.lit(None).cast("string")
    fast = checked.where("order_id is not null").select(
        "file", F.lit("valid").alias("verdict"), none.alias("reason"), none.alias("detail"),
        F.col("raw").cast("string").alias("line"), none.alias("line_base64"),
        F.octet_length("raw").cast("long").alias("line_bytes"), *ORDER)
    return fast.unionByName(_judge(checked.where("order_id is null"), day))


@dataclass(frozen=True)
class Judged:
    """The input's lines, judged in one pass and kept (persisted) for the job's others:
    - fast: the orders of the lines the fast path found plainly valid (ORDER columns;
      their lines are not kept: most days they are 99% of the bytes);
    - other: every other line as a CLASSIFIED row, check_line's verdict (Python judges
      each once);
    - lines: the input (raw, file), read again only for the copies of orders that arrived
      in different versions (their lines go to the rejects)."""

    fast: DataFrame
    other: DataFrame
    lines: DataFrame
    day: date

    def valid(self) -> DataFrame:
        """ORDER columns of every valid line."""
        return self.fast.unionByName(self.other.where("verdict = 'valid'").select(*ORDER))

    def copies_of(self, orders: DataFrame) -> DataFrame:
        """The CLASSIFIED rows of the valid lines of `orders` (order_id, ...), read again."""
        return classify(self.lines, self.day).where("verdict = 'valid'").join(orders, "order_id")


def judge(lines: DataFrame, day: date) -> Judged:
    """Judged of the (raw, file) lines: the fast path, then check_line for what it leaves.
    Kept as the job's frame keeps frames (twophase.spark.job.configure: uncompressed, and
    to disk what does not fit in memory)."""
    fast_line = F.col("order_id").isNotNull()
    checked = _fast_path(lines, day).select(
        F.when(~fast_line, F.col("raw")).alias("raw"), F.when(~fast_line, F.col("file")).alias("file"), *ORDER,
    ).persist(StorageLevel.MEMORY_AND_DISK)
    return Judged(checked.where(fast_line).select(*ORDER),
                  _judge(checked.where(~fast_line), day).persist(StorageLevel.MEMORY_AND_DISK), lines, day)


@contextmanager
def reading_input():
    """Around the first pass over the input's lines: a file the driver listed that an
    executor cannot find fails with the file's URI (HDFS's own message names no scheme)."""
    try:
        yield
    except Exception as exc:
        text = f"{getattr(exc, '_desc', '')}\n{getattr(exc, '_stackTrace', '')}" if hasattr(exc, "_desc") else str(exc)
        missing = _FILE_MISSING.search(text)
        if missing is None:
            raise
        raise FileNotFoundError(f"input file {missing.group(1)} was listed but is missing where Spark's executors "
                                "read it (deleted meanwhile, or a file:// input on a cluster, which is each "
                                "worker's own disk: use hdfs:// or s3a://)") from None


def read_lines(spark: SparkSession, spec) -> DataFrame:
    """(raw, file): every line of the load's files, as its exact bytes (Spark's text source
    splits lines at \\n, \\r\\n and \\r and keeps the bytes between undecoded)."""
    return read_source(spark, spec).select(F.col("value").cast("binary").alias("raw"), "file")


def customers_of(per_order: DataFrame, *keys) -> DataFrame:
    """dedupe's orders per customer and agreement (and per `keys`, columns of per_order):
    orders, their copies (lines), revenue, first and last order. Kept (persisted, a row or
    two per customer): the counts and the totals read it, and each frame staged."""
    return per_order.groupBy("customer_code", "agreed", *keys).agg(
        F.count(F.lit(1)).alias("orders"), F.sum("copies").alias("copies"),
        F.try_sum("cents").alias("cents"),  # null past a long's range: totals refuses it
        F.min("ordered_at").alias("first_order_at"), F.max("ordered_at").alias("last_order_at"),
    ).persist(StorageLevel.MEMORY_AND_DISK)


def totals(customers: DataFrame, day: str) -> DataFrame:
    """The day's row per customer (customers_of) of its agreed orders; revenue is
    decimal(22,2), the sum of the amounts as Spark sums decimal(12,2) ones."""
    customer = customer_of("customer_code")
    beyond = F.raise_error(F.format_string(f"revenue of %s on {day} is beyond {_BEYOND}: no single line is at fault, "
                                           "so nothing is loaded", customer))
    revenue = F.when(F.col("cents").isNull(), beyond).otherwise(
        F.col("cents").cast("decimal(19,0)") * F.lit(Decimal("0.01")))
    return customers.where("agreed").select(
        customer.alias("customer_id"), F.lit(day).cast("date").alias("day"),
        F.col("orders").cast("int").alias("orders"), revenue.alias("revenue"), "first_order_at", "last_order_at")


_LONG_MAX = 2 ** 63 - 1  # the largest sum of cents a long holds
_BEYOND = f"{Decimal(_LONG_MAX) / 100:,}"


def most_cents():
    """The largest agreed sum of cents of customers_of's rows (a long's largest when a sum
    went beyond it), an aggregate: check_revenue_fits is needed when it is above the
    column's limit."""
    return F.max(F.when(F.col("agreed"), F.coalesce("cents", F.lit(_LONG_MAX))))


def check_revenue_fits(customers: DataFrame, day: str) -> None:
    """A day's total can outgrow the column even when every amount fits: refuse the day,
    naming the customers, rather than let the cast fail deep inside the staging pass."""
    over = customers.where(F.col("agreed") & (F.col("cents").isNull() | (F.col("cents") > MAX_REVENUE_CENTS)))
    over = over.select(customer_of("customer_code").alias("customer_id"), "cents").orderBy("customer_id").limit(3)
    if rows := over.collect():
        sums = [f"{Decimal(r.cents) / 100:,}" if r.cents is not None else f"beyond {_BEYOND}" for r in rows]
        names = ", ".join(f"{r.customer_id} ({total})" for r, total in zip(rows, sums))
        raise ValueError(f"revenue of {names} on {day} is above {MAX_REVENUE:,}, the most "
                         "analytics.customer_daily_totals.revenue numeric(14,2) holds; no single line is at fault, "
                         "so nothing is loaded for the day")


def dedupe(valid: DataFrame) -> DataFrame:
    """Order events may be delivered more than once: per order id of the `valid` lines
    (ORDER columns), its copies and whether they all agree (same customer, amount and
    instant; the smallest equals the largest of each), with that order (order_id, copies,
    agreed, customer_code, cents, ordered_at). An order whose copies disagree is not loaded
    (which copy is right is unknown) and its copies are rejected. Aggregated in a hash
    table (no string in its state) and not kept: customers_of reads it once. The lines are
    shuffled as they are: a map-side aggregate of ids nearly all distinct saves nothing
    and costs a hash table of every line."""
    same = [F.min(c) == F.max(c) for c in ORDER[1:]]
    return valid.repartition("order_id").groupBy("order_id").agg(
        F.count(F.lit(1)).alias("copies"), (same[0] & same[1] & same[2]).alias("agreed"),
        *(F.min(c).alias(c) for c in ORDER[1:]))


def rejects_of(judged: Judged, per_order: DataFrame, conflicts: bool) -> DataFrame:
    """Rejected lines with the reason text and this line's detail, plus (when `conflicts`:
    the counts found orders whose copies disagree) every copy of such an order (per_order is
    then computed again, and their lines read again)."""
    reason_text = F.create_map(*[F.lit(x) for kv in REASONS.items() for x in kv])
    columns = ["file", "line", "line_base64", "line_bytes", "reason", "detail"]
    lines = judged.other.where("verdict = 'rejected'").select(*columns)
    if conflicts:
        copies = judged.copies_of(per_order.where("not agreed").select("order_id", "copies"))
        versions = copies.groupBy("order_id").agg(
            F.count_distinct(*ORDER[1:]).alias("versions"))
        lines = lines.unionByName(copies.join(versions, "order_id").select(
            "file", "line", "line_base64", "line_bytes", F.lit("conflicting_order").alias("reason"),
            F.format_string("order_id '%s' arrived %d times in %d different versions (customer, amount or time); "
                            "none of them is loaded", "order_id", "copies", "versions").alias("detail")))
    return lines.select("file", "line", "line_base64", "line_bytes", reason_text[F.col("reason")].alias("reason"),
                        "detail", F.col("reason").alias("reason_key"))


def tally(judged: Judged, customers: DataFrame, *aggregates) -> tuple:
    """In one Spark action (the first over the input's lines, so a file missing where the
    executors read is named): the `aggregates` of customers_of's rows, with valid_lines
    (the valid lines' copies) among them, and {(verdict, reason): (lines, an example
    detail)} of every line, the valid ones and each verdict of the other lines."""
    others = judged.other.where("verdict <> 'valid'").groupBy("verdict", "reason").agg(
        F.count(F.lit(1)).alias("count"), F.min("detail").alias("example"),
    ).agg(F.collect_list(F.struct("verdict", "reason", "count", "example")).alias("others"))
    with reading_input():
        row = customers.agg(F.sum("copies").alias("valid_lines"), *aggregates).crossJoin(others).first()
    counts = {(r["verdict"], r["reason"]): (r["count"], r["example"]) for r in row["others"]}
    return row, {**counts, ("valid", None): (row["valid_lines"] or 0, None)}


def locations(spec) -> tuple[str, str]:
    """The load's input folder (its source's) and rejects location, as storage URIs
    (twophase.spark.storage)."""
    if spec.source is None or spec.source.kind != "files" or spec.source_range is None:
        raise SpecError(f"load {spec.load_id} reads no folder: the example's jobs read an IntervalFolder source "
                        "(dags/orders_daily_totals.py)")
    return spec.source.folder, storage_uri(spec.input.get("rejects"), "the load's input 'rejects'")


def lines_at(spark: SparkSession, uri: str) -> int:
    """The lines of the files at `uri` as Spark reads that folder there (hidden names such
    as _SUCCESS left out); 0 when nothing is there."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.text(uri).count()
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(getattr(exc, "getCondition", lambda: None)() or exc):
            return 0
        raise


def keep_rejects(spark: SparkSession, rejects: DataFrame, uri: str, expected: int) -> None:
    """Write the rejected lines to `uri` (JSON lines, one file), then count them there:
    raises RejectsNotKept, naming both numbers and the URI, unless all `expected` are."""
    rejects.coalesce(1).write.mode("overwrite").json(uri)
    kept = lines_at(spark, uri)
    if kept != expected:
        hint = (" (file:// is the disk of the machine that writes: on a cluster, executors keep them on their own "
                "disks; use hdfs:// or s3a://)" if uri.startswith("file://") and kept < expected else "")
        raise RejectsNotKept(f"the job rejected {expected} lines but {kept} are at {uri} after the write{hint}")
    log.info("rejected lines kept in %s: %d, counted there after the write (fields: file, line, reason, detail; "
             "line_base64 holds the exact bytes of a line that is not UTF-8)", uri, kept)


def build(spark: SparkSession, spec) -> Output:
    (path, rejects), day = locations(spec), spec.input["date"]
    listing = listing_of(spec)
    skipped = skipped_metrics(spec, path)

    judged = judge(read_lines(spark, spec), date.fromisoformat(day))
    per_order = dedupe(judged.valid())
    customers = customers_of(per_order)
    agreed = F.col("agreed")
    dup, counts = tally(
        judged, customers,
        F.sum(F.when(agreed, F.col("copies") - F.col("orders"))).alias("duplicates"),
        F.sum(F.when(~agreed, F.col("copies"))).alias("conflicting_lines"),
        F.sum(F.when(~agreed, F.col("orders"))).alias("conflicting_orders"),
        F.sum(F.when(agreed, F.col("orders"))).alias("orders"), most_cents().alias("most_cents"))
    duplicates, conflicting = dup["duplicates"] or 0, dup["conflicting_lines"] or 0
    orders = dup["orders"] or 0

    by_reason = {REASONS[reason]: n for (verdict, reason), (n, _) in counts.items() if verdict == "rejected"}
    if conflicting:
        by_reason[REASONS["conflicting_order"]] = conflicting
    input_lines = sum(n for n, _ in counts.values())
    blank = counts.get(("blank", None), (0, None))[0]
    rejected = sum(by_reason.values())
    if input_lines - blank == 0:
        log.warning("input folder %s holds no order lines: the load has 0 rows (the min_rows gate decides "
                    "whether an empty day commits)", path)
    log.info("read %d lines in %d files from %s: %d orders loaded, %d rejected, %d duplicate deliveries skipped, "
             "%d blank lines skipped", input_lines, len(listing.read), path, orders, rejected,
             duplicates, blank)
    for (verdict, reason), (n, example) in sorted(counts.items(), key=lambda kv: -kv[1][0]):
        if verdict == "rejected":
            log.info("  rejected %d: %s (e.g. %s)", n, REASONS[reason], example)
    if conflicting:
        log.info("  rejected %d: %s (%d order ids)", conflicting, REASONS["conflicting_order"],
                 dup["conflicting_orders"])
    # Kept: written to the rejects folder, then staged to the quarantine (conflicting orders'
    # copies are read again from the input).
    rejected_lines = rejects_of(judged, per_order, conflicting > 0).persist(StorageLevel.MEMORY_AND_DISK)
    if rejected:
        keep_rejects(spark, rejected_lines, rejects, rejected)

    if (dup["most_cents"] or 0) > MAX_REVENUE_CENTS:
        check_revenue_fits(customers, day)
    result = totals(customers, day)
    metrics = {
        "input_files": len(listing.read), "input_lines": input_lines, "orders": orders,
        "rejected_lines": rejected, "rejected_by_reason": by_reason, "duplicate_lines": duplicates,
        "blank_lines": blank, **skipped,
    }
    per_customer = result.withColumn("revenue", F.col("revenue").cast("decimal(14,2)"))
    return Output({"": per_customer, "summary": day_summary(per_customer, day, rejected)}, metrics,
                  rejects=quarantined(rejected_lines) if rejected else None)


def quarantined(rejects: DataFrame) -> DataFrame:
    """The rejects as the quarantine keeps them: reason, source (the file), detail, and the
    line (up to MAX_REJECT_CHARS; bytes that are not UTF-8 as backslash escapes: line_base64
    in the rejects folder keeps them exactly)."""
    return rejects.select("reason", F.col("file").alias("source"), "detail", F.col("line").alias("content"))


def day_summary(per_customer: DataFrame, day: str, rejected: int) -> DataFrame:
    """One row for the day: its orders, revenue and customers, and the input lines rejected
    (an empty day is a row of zeros)."""
    return per_customer.agg(
        F.coalesce(F.sum("orders"), F.lit(0)).cast("int").alias("orders"),
        F.coalesce(F.sum("revenue"), F.lit(0)).cast("decimal(16,2)").alias("revenue"),
        F.count(F.lit(1)).cast("int").alias("customers"),
    ).select(F.lit(day).cast("date").alias("day"), "orders", "revenue", "customers",
             F.lit(rejected).cast("int").alias("rejected_lines"))


if __name__ == "__main__":
    run(build)
