"""What the audit reads: a target's staged rows, where they were staged, without moving them.

A participant's `staged_rows(vote, target)` returns a StagedRows (None: its kind cannot be
read before commit). Postgres answers in SQL over its staging table
(participants/postgres/staged.py); the other kinds hand their staged rows over as an Arrow
table (ArrowRows: Kafka decodes the staged records' JSON values, Iceberg reads the staged
Parquet files, the memory participant its set-aside rows).
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class NotMeasurable(Exception):
    """The rule cannot be measured on this target (a column it lacks, SQL on a topic)."""


class StagedRows(ABC):
    """One target's staged rows, read-only."""

    target: str

    @abstractmethod
    def count(self) -> int: ...

    @abstractmethod
    def nulls(self, column: str) -> int:
        """Rows whose `column` is null."""

    @abstractmethod
    def duplicates(self, columns: tuple[str, ...]) -> int:
        """Rows beyond the first of each distinct key (`columns`)."""

    @abstractmethod
    def outside(self, column: str, low, high) -> int:
        """Rows whose `column` is below `low` or above `high` (None: unbounded side)."""

    # The rows a row-level rule counted, for the quarantine: at most `limit`, as dicts.
    @abstractmethod
    def null_rows(self, column: str, limit: int) -> list[dict]: ...

    @abstractmethod
    def duplicate_rows(self, columns: tuple[str, ...], limit: int) -> list[dict]:
        """Rows beyond the first of each key, as duplicates() counts them."""

    @abstractmethod
    def outside_rows(self, column: str, low, high, limit: int) -> list[dict]: ...

    def sql(self, query: str, time_limit: float):
        """The first column of the first row of `query`, where `{staged}` names the staged
        rows as a relation, read-only, cancelled after `time_limit` seconds. Only where the
        rows are in SQL."""
        raise NotMeasurable(f"{self.target} is not staged in SQL: use a PythonRule over its rows")

    @abstractmethod
    def arrow(self):
        """All staged rows as a pyarrow.Table (for PythonRule)."""


class ArrowRows(StagedRows):
    """Staged rows already in memory as a pyarrow.Table."""

    def __init__(self, target: str, table):
        self.target, self.table = target, table

    @classmethod
    def of_records(cls, target: str, records: list[dict]) -> "ArrowRows":
        """From decoded records whose keys may differ (a JSON value leaves out its nulls):
        every key of any record is a column, null where a record lacks it. (Arrow's own
        from_pylist takes the columns of the first record only.)"""
        import pyarrow as pa

        columns = list(dict.fromkeys(key for record in records for key in record))
        return cls(target, pa.Table.from_pydict({c: [r.get(c) for r in records] for c in columns}))

    def _column(self, column: str):
        if self.table.num_rows == 0 and not self.table.column_names:
            import pyarrow as pa

            return pa.array([], pa.null())  # nothing staged (from an empty list: no columns either)
        if column not in self.table.column_names:
            raise NotMeasurable(f"{self.target} has no column {column!r} (it has {self.table.column_names})")
        return self.table.column(column)

    def count(self) -> int:
        return self.table.num_rows

    def nulls(self, column: str) -> int:
        return self._column(column).null_count

    def duplicates(self, columns: tuple[str, ...]) -> int:
        for c in columns:
            self._column(c)
        if self.table.num_rows == 0:
            return 0
        distinct = self.table.group_by(list(columns)).aggregate([]).num_rows
        return self.table.num_rows - distinct

    def _outside(self, column: str, low, high):
        """The mask of rows outside low..high (None: no bound at all)."""
        import pyarrow.compute as pc

        values = self._column(column)
        below = pc.less(values, low) if low is not None else None
        above = pc.greater(values, high) if high is not None else None
        both = [m for m in (below, above) if m is not None]
        if not both:
            return None
        return pc.fill_null(both[0] if len(both) == 1 else pc.or_(both[0], both[1]), False)

    def outside(self, column: str, low, high) -> int:
        import pyarrow.compute as pc

        mask = self._outside(column, low, high)
        return 0 if mask is None else pc.sum(pc.cast(mask, "int64")).as_py() or 0

    def null_rows(self, column: str, limit: int) -> list[dict]:
        import pyarrow.compute as pc

        return self.table.filter(pc.is_null(self._column(column))).slice(0, limit).to_pylist()

    def duplicate_rows(self, columns: tuple[str, ...], limit: int) -> list[dict]:
        import pyarrow as pa
        import pyarrow.compute as pc

        for c in columns:
            self._column(c)
        if self.table.num_rows == 0:
            return []
        numbered = self.table.append_column("_twophase_row", pa.array(range(self.table.num_rows), pa.int64()))
        firsts = numbered.group_by(list(columns)).aggregate([("_twophase_row", "min")]).column("_twophase_row_min")
        later = pc.invert(pc.is_in(numbered.column("_twophase_row"), value_set=firsts))
        return self.table.filter(later).slice(0, limit).to_pylist()

    def outside_rows(self, column: str, low, high, limit: int) -> list[dict]:
        mask = self._outside(column, low, high)
        return [] if mask is None else self.table.filter(mask).slice(0, limit).to_pylist()

    def arrow(self):
        return self.table
