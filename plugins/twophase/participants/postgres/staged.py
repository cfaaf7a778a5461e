"""The audit's view of a table's staged rows: SQL over its staging table, read-only."""

from __future__ import annotations

from psycopg2 import sql

from ...audit.staged import NotMeasurable, StagedRows
from .server import PART_COLUMN, _autocommit


class PostgresRows(StagedRows):
    """`staging`: the schema-qualified staging table of `target` (its rows, without load_id,
    plus the partition column)."""

    def __init__(self, dsn: str, target: str, staging: str):
        self.dsn, self.target, self.staging = dsn, target, staging

    def _one(self, query, args=()):
        with _autocommit(self.dsn) as cur:
            cur.execute(query, args)
            return cur.fetchone()[0]

    def _columns(self) -> list[str]:
        schema, table = self.staging.split(".", 1)
        with _autocommit(self.dsn) as cur:
            cur.execute("select column_name from information_schema.columns where table_schema = %s and "
                        "table_name = %s and column_name <> %s order by ordinal_position", (schema, table, PART_COLUMN))
            return [r[0] for r in cur.fetchall()]

    def _column(self, column: str) -> sql.Identifier:
        if column not in self._columns():
            raise NotMeasurable(f"{self.target} has no column {column!r}")
        return sql.Identifier(column)

    def _relation(self) -> sql.Composable:
        return sql.SQL(self.staging)

    def count(self) -> int:
        return self._one(sql.SQL("select count(*) from {}").format(self._relation()))

    def nulls(self, column: str) -> int:
        return self._one(sql.SQL("select count(*) from {} where {} is null").format(self._relation(),
                                                                                      self._column(column)))

    def duplicates(self, columns: tuple[str, ...]) -> int:
        keys = sql.SQL(", ").join(self._column(c) for c in columns)
        # Rows minus distinct keys; a null in a key counts as a value (as DISTINCT treats it).
        return self._one(sql.SQL("select (select count(*) from {rel}) - (select count(*) from (select distinct {keys} "
                                 "from {rel}) d)").format(keys=keys, rel=self._relation()))

    def outside(self, column: str, low, high) -> int:
        c = self._column(column)
        return self._one(sql.SQL("select count(*) from {rel} where {c} < %s or {c} > %s").format(
            rel=self._relation(), c=c), (low, high))

    def _rows(self, query: sql.Composable, args=()) -> list[dict]:
        with _autocommit(self.dsn) as cur:
            cur.execute(query, args)
            names = [d[0] for d in cur.description]
            return [{n: v for n, v in zip(names, r) if n not in (PART_COLUMN, "_n")} for r in cur.fetchall()]

    def null_rows(self, column: str, limit: int) -> list[dict]:
        return self._rows(sql.SQL("select * from {} where {} is null limit %s").format(
            self._relation(), self._column(column)), (limit,))

    def duplicate_rows(self, columns: tuple[str, ...], limit: int) -> list[dict]:
        keys = sql.SQL(", ").join(self._column(c) for c in columns)
        return self._rows(sql.SQL("select * from (select *, row_number() over (partition by {keys}) as _n from {rel}) "
                                  "d where _n > 1 limit %s").format(keys=keys, rel=self._relation()), (limit,))

    def outside_rows(self, column: str, low, high, limit: int) -> list[dict]:
        c = self._column(column)
        return self._rows(sql.SQL("select * from {rel} where {c} < %s or {c} > %s limit %s").format(
            rel=self._relation(), c=c), (low, high, limit))

    def sql(self, query: str, time_limit: float):
        """Runs as one subquery of a read-only transaction, so a rule can neither change what
        it audits nor end that transaction (`commit;` in it is a syntax error, and so is a
        data-modifying WITH); its statement is cancelled by the server after `time_limit`."""
        body = query.strip().removesuffix(";").replace("{staged}", f"(select * from {self.staging}) as staged")
        with _autocommit(self.dsn) as cur:
            cur.execute("begin read only")
            try:
                cur.execute("set local statement_timeout = %s", (f"{max(1, round(time_limit * 1000))}ms",))
                cur.execute(f"select * from ({body}) as rule limit 1")
                row = cur.fetchone()
            finally:
                cur.execute("rollback")
        return None if row is None else row[0]

    def arrow(self):
        import pyarrow as pa

        columns = self._columns()
        with _autocommit(self.dsn) as cur:
            cur.execute(sql.SQL("select {} from {}").format(sql.SQL(", ").join(map(sql.Identifier, columns)),
                                                           self._relation()))
            rows = cur.fetchall()
        return pa.Table.from_pylist([dict(zip(columns, r)) for r in rows])
