"""The rows every contender writes: two shapes, generated deterministically with Spark.

- narrow: the example pipeline's output (analytics.customer_daily_totals): customer_id,
  day, orders, revenue, first_order_at, last_order_at; the table adds load_id.
- wide: the same plus 11 columns of mixed types (text, nullable text with quotes and
  commas, bigint, numeric, boolean, double, date, timestamptz).

Every value is a pure function of spark.range's id, so a dataset is the same in every
run. `Dataset.load` persists it on local disk (DISK_ONLY) and counts it before any clock
starts: generation is never timed, and the rows do not sit in the driver's heap, so the
memory figures are the writers' own. The CSV the COPY limit reads is written once from
the same DataFrame into .stack/bench-data/ and reused by later runs.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / ".stack" / "bench-data"
# Bump when the generator changes: cached CSV files of an older version are not reused.
VERSION = 1
DAY = "2026-11-20"
KEY_COLUMN = "customer_id"
LOAD_ID = "bench"  # the load_id column of the peers' and the COPY limit's rows

NARROW_DDL = """customer_id text not null, day date not null, orders int not null,
    revenue numeric(14, 2) not null, first_order_at timestamptz not null,
    last_order_at timestamptz not null"""
WIDE_DDL = NARROW_DDL + """, region text not null, channel text not null, coupon text,
    items bigint not null, discount numeric(12, 2) not null, tax numeric(12, 2) not null,
    is_member boolean not null, score double precision not null, first_seen date not null,
    updated_at timestamptz not null, note text"""
SHAPES = ("narrow", "wide")


# Every row's day, as a load's data interval (publish "attach": the partition it becomes).
DAY_INTERVAL = (f"{DAY}T00:00:00+00:00", f"{date.fromisoformat(DAY) + timedelta(days=1)}T00:00:00+00:00")


def table_ddl(shape: str, table: str, partitioned: bool = False) -> str:
    """The target table of every contender: the shape's columns, load_id, primary key;
    `partitioned`: by range on day (for publish "attach")."""
    columns = {"narrow": NARROW_DDL, "wide": WIDE_DDL}[shape]
    return (f"create table {table} ({columns}, load_id text not null, primary key (day, customer_id))"
            + (" partition by range (day)" if partitioned else ""))


def _columns(shape: str, partitions: int, rows: int, spark):
    from pyspark.sql import functions as F

    id_ = F.col("id")
    base = F.lit(f"{DAY} 00:00:00").cast("timestamp")
    first = F.timestamp_seconds(F.unix_timestamp(base) + id_ % 43200)
    cols = [
        F.format_string("c%09d", id_).alias("customer_id"),
        F.lit(DAY).cast("date").alias("day"),
        (id_ % 40 + 1).cast("int").alias("orders"),
        ((id_ % 1000000) / 100).cast("decimal(14,2)").alias("revenue"),
        first.alias("first_order_at"),
        F.timestamp_seconds(F.unix_timestamp(first) + id_ % 7200).alias("last_order_at"),
    ]
    if shape == "wide":
        cols += [
            F.element_at(F.array(*map(F.lit, ["north", "south", "east", "west", "central"])),
                         (id_ % 5 + 1).cast("int")).alias("region"),
            F.element_at(F.array(*map(F.lit, ["web", "app", "store", "phone"])), (id_ % 4 + 1).cast("int")).alias("channel"),
            F.when(id_ % 3 == 0, F.lit(None).cast("string")).otherwise(F.format_string("SAVE%02d", id_ % 50)).alias("coupon"),
            (id_ % 97 + 1).alias("items"),
            ((id_ % 5000) / 100).cast("decimal(12,2)").alias("discount"),
            ((id_ % 20000) / 100).cast("decimal(12,2)").alias("tax"),
            (id_ % 2 == 0).alias("is_member"),
            ((id_ % 10007) / 7.0).alias("score"),
            F.date_sub(F.lit(DAY).cast("date"), (id_ % 365).cast("int")).alias("first_seen"),
            F.timestamp_seconds(F.unix_timestamp(base) + id_ % 86400).alias("updated_at"),
            F.when(id_ % 5 == 0, F.lit(None).cast("string")).when(id_ % 5 == 1, F.lit(""))
             .otherwise(F.lit('say "hi", ok')).alias("note"),
        ]
    return spark.range(rows, numPartitions=partitions).select(*cols)


def kafka_records(df):
    """key and value columns as the atomic load's staging makes them (spark_stage.stage):
    key = customer_id, value = the row (without load_id) as a JSON object."""
    from pyspark.sql import functions as F

    columns = [c for c in df.columns if c != "load_id"]
    return df.select(F.col(KEY_COLUMN).cast("string").cast("binary").alias("key"),
                     F.to_json(F.struct(*[F.col(c) for c in columns])).cast("binary").alias("value"))


@dataclass
class Dataset:
    shape: str
    rows: int
    partitions: int
    df: object                 # the generated rows, persisted on disk, without load_id
    avg_record_bytes: int      # mean key + value size of its Kafka records

    @classmethod
    def load(cls, spark, shape: str, rows: int, partitions: int) -> "Dataset":
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        df = _columns(shape, partitions, rows, spark).persist(StorageLevel.DISK_ONLY)
        records = kafka_records(df)
        stats = records.select(F.count(F.lit(1)).alias("n"),
                               F.avg(F.octet_length("key") + F.octet_length("value")).alias("size")).first()
        assert stats.n == rows, f"generated {stats.n} rows, wanted {rows}"
        return cls(shape, rows, partitions, df, round(stats.size))

    @property
    def columns(self) -> list[str]:
        return list(self.df.columns)

    def with_load_id(self):
        """The rows as the peers write them: the table's columns, load_id included."""
        from pyspark.sql import functions as F

        return self.df.withColumn("load_id", F.lit(LOAD_ID))

    def csv_parts(self) -> list[Path]:
        """The rows (load_id included) as CSV files in the table's column order, written
        once per shape and size: quotes doubled, NULL as an empty field, '' as "",
        timestamps with their offset, so Postgres' COPY ... (format csv) reads them."""
        folder = DATA_DIR / f"{self.shape}-{self.rows}-v{VERSION}.csv"
        done = folder / "_bench.json"
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            (self.with_load_id().write.mode("overwrite")
             .option("header", False).option("quote", '"').option("escape", '"')
             .option("nullValue", "").option("emptyValue", '""')
             .option("timestampFormat", "yyyy-MM-dd HH:mm:ss.SSSSSSXXX").option("dateFormat", "yyyy-MM-dd")
             .csv(str(folder)))
            done.write_text(json.dumps({"shape": self.shape, "rows": self.rows, "version": VERSION}))
        return sorted(folder.glob("part-*.csv"))

    def drop(self) -> None:
        self.df.unpersist(blocking=True)
