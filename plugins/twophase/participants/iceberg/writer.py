"""IcebergWriter: the executor side. Writes one Spark partition's rows as Parquet data files
of the table's schema in the load's staging directory; nothing references them yet.

Needs only pyarrow on the executors (no catalog, no pyiceberg). Each attempt of a
partition writes files of its own (`part-<partition>-<attempt>-<n>.parquet`), one per value
of the table's identity partition columns, so a retried or speculative attempt never
touches another's files; prepare keeps the files of the successful attempts only.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..contract import PartitionWriter
from .catalog import filesystem


class _File:
    """One staged file being written: its URI, its path in the filesystem, its stream."""

    def __init__(self, fs, uri: str, path: str, schema: pa.Schema):
        self.uri, self.path, self.rows = uri, path, 0
        self.stream = fs.open_output_stream(path)
        self.writer = pq.ParquetWriter(self.stream, schema)

    def close(self) -> None:
        self.writer.close()
        self.stream.close()


class IcebergWriter(PartitionWriter):
    def __init__(self, directory: str, schema: bytes, partition_columns: list[str], load_id: str, target: str):
        self.directory = directory        # the load's staging directory (a URI)
        self.schema_ipc = schema          # the table's Arrow schema, serialized (Schema.serialize())
        self.partition_columns = list(partition_columns)
        self.load_id, self.target = load_id, target
        self._files: dict[tuple, _File] = {}

    def open(self, partition: int, attempt: str) -> None:
        self.partition, self.attempt = partition, attempt
        self.schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        self.columns = [f.name for f in self.schema if f.name != "load_id"]
        self.fs, self.base = filesystem(self.directory)
        self.fs.create_dir(self.base, recursive=True)
        self._files = {}  # partition values -> _File
        self.rows = 0

    def write(self, batch) -> None:
        table = pa.Table.from_batches([batch]).select(self.columns)
        table = table.append_column("load_id", pa.array([self.load_id] * table.num_rows, pa.string()))
        table = table.cast(self.schema)
        if not self.partition_columns:
            self._append((), table)
            return
        keys = table.select(self.partition_columns).group_by(self.partition_columns).aggregate([])
        for key in keys.to_pylist():
            mask = None
            for column, value in key.items():
                match = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
                mask = match if mask is None else pc.and_(mask, match)
            self._append(tuple(key[c] for c in self.partition_columns), table.filter(mask))

    def _append(self, key: tuple, rows: pa.Table) -> None:
        if key not in self._files:
            name = f"part-{self.partition:05d}-{self.attempt}-{len(self._files):04d}.parquet"
            self._files[key] = _File(self.fs, f"{self.directory.rstrip('/')}/{name}", f"{self.base.rstrip('/')}/{name}",
                                     self.schema)
        staged = self._files[key]
        staged.writer.write_table(rows)
        staged.rows += rows.num_rows
        self.rows += rows.num_rows

    def close(self) -> dict:
        files = []
        for staged in self._files.values():
            staged.close()
            files.append({"path": staged.uri, "rows": staged.rows, "bytes": self.fs.get_file_info(staged.path).size})
        self._files = {}
        return {"rows": self.rows, "files": files}

    def discard(self) -> None:
        for staged in self._files.values():
            try:
                staged.close()
                self.fs.delete_file(staged.path)
            except Exception:  # noqa: BLE001 - best effort: prepare deletes a failed attempt's files too
                pass
        self._files = {}
