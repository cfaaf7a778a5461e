"""The Iceberg participant's staging beside pyarrow writing the same Parquet files alone,
and its commit (issue 15).

Each repetition, on the same rows, into a fresh table of the stack's catalog
(TWOPHASE_ICEBERG_CATALOG, namespace `bench`, unpartitioned, created from the dataset's
columns):

- setup: the participant's stage() (creates the table, checks the columns, clears the
  load's staging directory);
- pyarrow alone: the same Spark pass (spark_stage.stage) with a bench writer that does
  only what makes the same files: per partition one file written by
  pyarrow.parquet.ParquetWriter into a fresh local folder, with the table's Arrow schema
  (its field ids) and the load_id column, without catalog, staging directory or prepare;
- staging: the pass with the participant's own writer (IcebergWriter);
- prepare: the participant's prepare() (the files checked, the vote);
- commit: the participant's commit(vote), one catalog commit adding the files.

The pass alone is what the ratio staging / pyarrow alone compares: both write the same
bytes through the same Spark pass. Rows are checked after each clock stops (the files'
footers; a pyiceberg scan of the committed table by load id, streamed one column). The
table is purged and its folder deleted after each repetition; `sweep` removes what an
interrupted run left.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from twophase.ids import load_id_for
from twophase.participants.contract import PartitionWriter, Staging
from twophase.participants.iceberg import IcebergParticipant, IcebergTarget, catalog_of
from twophase.participants.iceberg.catalog import arrow_schema, filesystem
from twophase.protocol.outcome import Kind
from twophase.spark import stage as spark_stage

from . import scratch
from .data import ROOT, Dataset

NAMESPACE = "bench"
PARQUET_DIR = ROOT / ".stack" / "bench" / "parquet"  # pyarrow alone's folders
PHASES = ("setup", "pyarrow_alone", "staging", "prepare", "commit")
# Spark's type names (simpleString) that differ from Iceberg's; the others are the same.
# Spark's timestamp is an instant (the Postgres tables' timestamptz).
_ICEBERG_TYPES = {"bigint": "long", "timestamp": "timestamptz"}


def catalog_address() -> str:
    return os.environ["TWOPHASE_ICEBERG_CATALOG"]


def columns_of(data: Dataset) -> dict[str, str]:
    """The dataset's columns as Iceberg types (narrow and wide: string, date, int, long,
    decimal(p,s), boolean, double, timestamptz)."""
    spark_types = {f.name: f.dataType.simpleString() for f in data.df.schema.fields}
    return {name: _ICEBERG_TYPES.get(t, t) for name, t in spark_types.items()}


class _ParquetAlone(PartitionWriter):
    """One Parquet file per Spark partition: the batch's columns in the table's order, the
    load_id column added, cast to the table's Arrow schema (what IcebergWriter writes)."""

    def __init__(self, folder: str, schema: bytes, load_id: str):
        self.folder, self.schema_ipc, self.load_id = folder, schema, load_id

    def open(self, partition: int, attempt: str) -> None:
        self.schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        self.columns = [f.name for f in self.schema if f.name != "load_id"]
        self.path = f"{self.folder}/part-{partition:05d}-{attempt}.parquet"
        self.writer = pq.ParquetWriter(self.path, self.schema)
        self.rows = 0

    def write(self, batch) -> None:
        table = pa.Table.from_batches([batch]).select(self.columns)
        table = table.append_column("load_id", pa.array([self.load_id] * table.num_rows, pa.string()))
        self.writer.write_table(table.cast(self.schema))
        self.rows += table.num_rows

    def close(self) -> dict:
        self.writer.close()
        return {"rows": self.rows, "path": self.path}

    def discard(self) -> None:
        try:
            self.writer.close()
            os.remove(self.path)
        except Exception:  # noqa: BLE001 - best effort: the folder is deleted afterwards
            pass


def _timed(seconds: dict, key: str, call):
    started = time.perf_counter()
    result = call()
    seconds[key] = time.perf_counter() - started
    return result


def _pyarrow_alone(data: Dataset, schema: pa.Schema, load_id: str, folder: Path) -> float:
    """The Spark pass writing one Parquet file per partition with pyarrow alone; seconds."""
    folder.mkdir(parents=True)
    writer = _ParquetAlone(str(folder), schema.serialize().to_pybytes(), load_id)
    started = time.perf_counter()
    staged = spark_stage.stage(data.df, {"pyarrow": Staging({"pyarrow": writer})})
    seconds = time.perf_counter() - started
    paths = [r["path"] for r in staged.reports["pyarrow"]["pyarrow"]]
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    assert rows == sum(staged.expected.values()) == data.rows, f"pyarrow alone wrote {rows} rows of {data.rows}"
    return seconds


def _committed_rows(table, load_id: str) -> int:
    """The load's rows in the table's current snapshot, as a reader scans them (one column, streamed)."""
    from pyiceberg.expressions import EqualTo

    table.refresh()
    scan = table.scan(row_filter=EqualTo("load_id", load_id), selected_fields=("load_id",))
    return sum(batch.num_rows for batch in scan.to_arrow_batch_reader())


def measure(data: Dataset) -> dict[str, float]:
    """Seconds of each phase (PHASES) of one repetition, into a fresh table, removed afterwards."""
    name = scratch.new_name()
    load_id = load_id_for(scratch.PIPELINE, f"iceberg-{name}")
    target = IcebergTarget(f"{NAMESPACE}.t_{name}", columns=columns_of(data), partition_by=())
    participant = IcebergParticipant(catalog_address(), target, load_id)
    folder = PARQUET_DIR / name
    seconds: dict[str, float] = {}
    try:
        staging = _timed(seconds, "setup", lambda: participant.stage({"": data.columns}))
        table = participant.catalog.load_table(target.table)
        seconds["pyarrow_alone"] = _pyarrow_alone(data, arrow_schema(table), load_id, folder)
        shutil.rmtree(folder)
        staged = _timed(seconds, "staging", lambda: spark_stage.stage(data.df, {participant.name: staging}))
        assert staged.expected[target.name] == data.rows, f"Iceberg staging saw {staged.expected} of {data.rows}"
        vote = _timed(seconds, "prepare", lambda: participant.prepare(
            staging.marks, staged.reports[participant.name], staged.expected))
        assert vote.yes, vote.reason
        outcome = _timed(seconds, "commit", lambda: participant.commit(vote))
        assert outcome.kind == Kind.DONE, outcome.describe()
        rows = _committed_rows(table, load_id)
        assert rows == data.rows, f"a scan of {target.table} counts {rows} rows of load {load_id}, not {data.rows}"
    finally:
        shutil.rmtree(PARQUET_DIR, ignore_errors=True)
        drop(participant.catalog, target.table)
    return {p: seconds[p] for p in PHASES}


def drop(catalog, table_name: str) -> None:
    """Purge the table (its data and metadata files) and delete its folder (staged files
    no snapshot references, empty directories)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        location = catalog.load_table(table_name).location()
    except NoSuchTableError:
        return
    catalog.purge_table(table_name)
    fs, path = filesystem(location)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass


def sweep() -> None:
    """Leftovers of an interrupted run: every table of the namespace, pyarrow alone's folders."""
    catalog = catalog_of(catalog_address())
    if (NAMESPACE,) in catalog.list_namespaces():
        for identifier in catalog.list_tables(NAMESPACE):
            drop(catalog, ".".join(identifier))
    shutil.rmtree(PARQUET_DIR, ignore_errors=True)
