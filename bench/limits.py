"""The machine's limits, without Spark in the way.

- copy: Postgres' COPY ... FROM (format csv) of the same rows, from the CSV files written
  once (data.Dataset.csv_parts), into a fresh table of the same kind (primary key
  included), in one transaction. The server runs as its own user and the bench's role may
  not read server files (pg_read_server_files), so the files are streamed by the client
  (COPY FROM STDIN, psycopg2's copy_expert) over the local TCP connection.
- producer_tool: Kafka's own org.apache.kafka.tools.ProducerPerformance from the broker's
  jars (.stack/kafka/libs), the same record count and mean record size (key + value) as
  the data, --throughput -1, acks=all, to a fresh topic with as many partitions as the
  others; its own summary line gives records/s (JVM start-up excluded).
"""

from __future__ import annotations

import re
import subprocess
import time
from contextlib import closing
from pathlib import Path

import psycopg2

from . import scratch
from .data import ROOT, Dataset

KAFKA_LIBS = ROOT / ".stack" / "kafka" / "libs"
TOOL = "org.apache.kafka.tools.ProducerPerformance"
_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency")


class _Files:
    """One file-like object reading several files in turn (what COPY FROM STDIN reads)."""

    def __init__(self, paths: list[Path]):
        self._paths, self._file = list(paths), None

    def read(self, size: int = -1) -> bytes:
        while True:
            if self._file is None:
                if not self._paths:
                    return b""
                self._file = open(self._paths.pop(0), "rb")
            chunk = self._file.read(size)
            if chunk:
                return chunk
            self._file.close()
            self._file = None


def copy(data: Dataset, dsn: str) -> float:
    parts = data.csv_parts()
    with scratch.written_table(dsn, data.shape, data.rows, "COPY") as table:
        with closing(psycopg2.connect(dsn)) as conn:
            with conn.cursor() as cur:
                started = time.perf_counter()
                cur.copy_expert(f"copy {table} from stdin with (format csv)", _Files(parts), size=1 << 20)
                conn.commit()
                return time.perf_counter() - started


def producer_tool(data: Dataset, bootstrap: str) -> dict:
    """{'seconds': rows / the tool's records/s, 'records_per_s', 'mb_per_s', 'wall_s'}."""
    topic = scratch.create_topic(bootstrap, scratch.new_name())
    log4j = ROOT / ".stack" / "kafka" / "log4j2.properties"
    cmd = ["java", "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{KAFKA_LIBS}/*", TOOL,
           "--topic", topic, "--num-records", str(data.rows), "--record-size", str(data.avg_record_bytes),
           "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all"]
    try:
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - started
        found = _SUMMARY.findall(done.stdout)
        if done.returncode != 0 or not found:
            raise RuntimeError(f"{TOOL} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        sent, rate, mb, _latency = found[-1]
        assert int(sent) == data.rows, f"the producer tool sent {sent} records of {data.rows}"
        return {"seconds": data.rows / float(rate), "records_per_s": float(rate), "mb_per_s": float(mb), "wall_s": wall}
    finally:
        scratch.delete_topics(bootstrap, [topic])
