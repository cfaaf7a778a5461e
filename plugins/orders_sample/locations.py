"""Where the order examples keep their data (dags/orders_daily_totals.py and
dags/orders_hourly_totals.py): ORDERS_DATA, a storage URI (file://, hdfs:// or s3a://, or
an absolute local path, made file://; this checkout's .stack/data/orders when unset), and
under it each day's landing folder and each load's rejects. URIs are joined as strings:
pathlib would turn hdfs://nn/x into hdfs:/nn/x."""

from __future__ import annotations

import os
from pathlib import Path

from twophase.spark.storage import join_uri, storage_uri

ROOT = Path(__file__).resolve().parents[2]


def orders_data() -> str:
    """ORDERS_DATA as a storage URI. A bad value refuses the load in begin, naming the value
    and ORDERS_DATA."""
    return storage_uri(os.environ.get("ORDERS_DATA", str(ROOT / ".stack" / "data" / "orders")), "ORDERS_DATA")


def day_folder(interval) -> str:
    """The landing folder of the interval's day (an IntervalFolder's folder)."""
    return join_uri(orders_data(), "landing", f"date={interval.day.isoformat()}")


def rejects_folder(day: str, load_id: str) -> str:
    """Where the load `load_id` of the day (YYYY-MM-DD) writes its rejected lines."""
    return join_uri(orders_data(), "rejects", f"date={day}", f"load={load_id}")
