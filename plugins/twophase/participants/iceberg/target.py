"""IcebergTarget: an Apache Iceberg table a load writes, as plain data (stored with the
load in the transaction log). Depends only on the standard library and twophase.errors."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...errors import SpecError
from ...schema import check as check_schema, iceberg_types
from ..target_rules import IDENT, check_names, check_table

# The column types a table created by the participant may have (Iceberg's primitive types,
# by the names Iceberg's spec gives them); decimal(p, s) too.
COLUMN_TYPES = ("boolean", "int", "long", "float", "double", "date", "time", "timestamp", "timestamptz", "string",
                "uuid", "binary")
_DECIMAL = re.compile(r"^decimal\((\d{1,2}),\s*(\d{1,2})\)$")
NAME_PREFIX = "iceberg:"  # a target's name in the load: a table of the same name may be in Postgres too


def check_column_type(column: str, type_: str) -> None:
    if type_ not in COLUMN_TYPES and not _DECIMAL.match(type_):
        raise SpecError(f"iceberg column {column!r} has type {type_!r}, which is not one of "
                        f"{', '.join(COLUMN_TYPES)} or decimal(precision, scale)")


@dataclass(frozen=True)
class IcebergTarget:
    """`table` is `namespace.table` in the catalog of `connection` ('' = the default one);
    tables of one catalog share one participant, and each commits as one Iceberg snapshot
    carrying the load id. The table has a `load_id` string column (the participant adds it
    when it creates the table).

    `columns` ({name: Iceberg type}, in order, without load_id): when given, the table is
    created with them when it does not exist, partitioned by `partition_by` (identity
    partitions; each staged file holds one partition's rows). Without them the table must
    exist. mode "append" adds the load's rows; mode "replace" first deletes the rows
    matching `replace_where` ({column: value}) in the same catalog commit, so readers see
    the old rows until the instant the new ones appear. `frame`: which of the job's
    DataFrames it loads ('' = the job's main one). `frame_schema`: the declared columns of its
    frame ({column: Spark type}, twophase.schema): with one, the frame must match it, the
    table is created from it (its `columns` when none are given), and a table that lacks
    one of them is refused, naming it.
    """

    table: str
    mode: str = "append"
    replace_where: dict[str, Any] = field(default_factory=dict)
    connection: str = ""
    frame: str = ""
    columns: dict[str, str] = field(default_factory=dict)
    partition_by: tuple[str, ...] = ()
    frame_schema: dict[str, str] = field(default_factory=dict)
    kind = "iceberg"

    def __post_init__(self):
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        object.__setattr__(self, "frame_schema", check_schema(self.frame_schema, f"iceberg table {self.table}")
                           if self.frame_schema else {})
        object.__setattr__(self, "columns", dict(self.columns) or iceberg_types(self.frame_schema))
        check_names(self)
        check_table(self, "namespace.table")
        for column in [*self.replace_where, *self.columns, *self.partition_by]:
            if not IDENT.match(column):
                raise SpecError(f"iceberg table {self.table}: column {column!r} is not a plain identifier")
        for column, type_ in self.columns.items():
            check_column_type(column, type_)
        if "load_id" in self.columns:
            raise SpecError(f"iceberg table {self.table}: load_id is added by the participant; leave it out of columns")
        if self.columns:
            unknown = [c for c in self.partition_by if c not in self.columns]
            if unknown:
                raise SpecError(f"iceberg table {self.table}: partition_by names {unknown}, not among its columns")
        elif self.partition_by:
            raise SpecError(f"iceberg table {self.table}: partition_by needs columns (it only shapes a new table)")

    @property
    def namespace(self) -> str:
        return self.table.split(".")[0]

    @property
    def name(self) -> str:
        """The target's name in the load (votes, summaries, verify)."""
        return NAME_PREFIX + self.table

    def for_replacement(self, replaces: list[str]) -> "IcebergTarget":
        return self
