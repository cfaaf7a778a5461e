"""PostgresTarget: a table a load writes, as plain data (stored with the load in the
transaction log). Depends only on the standard library and twophase.errors."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import SpecError
from ...schema import check as check_schema
from ..target_rules import IDENT, check_names, check_table

PUBLISH = ("insert", "attach")


@dataclass(frozen=True)
class PostgresTarget:
    """`table` is `schema.table`; it must have a `load_id` text column.

    mode "append" adds the load's rows; mode "replace" first deletes the rows matching
    `replace_where` ({column: value}) inside the same prepared transaction, so readers
    see the old rows until the instant the new ones appear.
    `connection`: which database ('' = the default one; else a named connection, see
    Connections); tables of one database share one prepared transaction. `frame`: which
    of the job's DataFrames it loads ('' = the job's main one).
    `prepared`: how its database commits (docs/adr/0011): None, with a prepared
    transaction where the server allows them (max_prepared_transactions above 0), else as
    the load's last resource; True, always prepared (refused at begin where the server
    cannot); False, always as the last resource. Tables of one database must agree.
    `frame_schema`: the declared columns of its frame ({column: Spark type}, twophase.schema);
    with one, the frame must match it and a table that lacks one of them is refused,
    naming the statement that adds it ({} = the table's own columns, taken from the frame).
    `publish`: how the staged rows reach the table (docs/adr/0013): "insert" (INSERT ...
    SELECT from staging, any table), or "attach" (a table partitioned by range on one date
    or timestamp column: the staging table becomes the partition of the load's interval,
    ATTACH PARTITION, whatever the row count; mode replace detaches and drops the
    interval's partition instead of deleting rows, so it takes no replace_where).
    `interval`: the load's data interval, set by its LoadSpec for publish "attach" (the
    partition's bounds, kept in the log with the target).
    """

    table: str
    mode: str = "append"
    replace_where: dict[str, Any] = field(default_factory=dict)
    connection: str = ""
    frame: str = ""
    prepared: bool | None = None
    frame_schema: dict[str, str] = field(default_factory=dict)
    publish: str = "insert"
    interval: tuple = ()
    kind = "postgres"

    def __post_init__(self):
        check_names(self)
        object.__setattr__(self, "frame_schema",
                           check_schema(self.frame_schema, f"table {self.table}") if self.frame_schema else {})
        if self.publish not in PUBLISH:
            raise SpecError(f"table {self.table}: publish must be one of {PUBLISH}, got {self.publish!r}")
        attach = self.publish == "attach"
        if attach and self.replace_where:
            raise SpecError(f"table {self.table}: publish 'attach' replaces the partition of the load's interval, "
                            "so it takes no replace_where")
        object.__setattr__(self, "interval", tuple(self.interval))
        check_table(self, "schema.table", where_needed=not attach)
        if self.prepared not in (None, True, False):
            raise SpecError(f"table {self.table}: prepared must be None (as the server allows), True or False, "
                            f"got {self.prepared!r}")
        for column in self.replace_where:
            if not IDENT.match(column):
                raise SpecError(f"replace_where column {column!r} is not a plain identifier")

    @property
    def replaced(self) -> dict:
        """Which rows a replace load swaps: its replace_where, or the interval's partition."""
        return {"partition": list(self.interval)} if self.publish == "attach" else self.replace_where

    def in_interval(self, interval: tuple | None) -> "PostgresTarget":
        """The target of a load of `interval` (ISO timestamps): publish 'attach' keeps it
        as the partition's bounds, and needs one."""
        if self.publish != "attach":
            return self
        if not interval:
            raise SpecError(f"table {self.table}: publish 'attach' makes the load's data interval a partition, and "
                            "the load has no data interval")
        return replace(self, interval=tuple(str(x) for x in interval))

    @property
    def schema(self) -> str:
        return self.table.split(".")[0]

    @property
    def relation(self) -> str:
        return self.table.split(".")[1]

    @property
    def name(self) -> str:
        """The target's name in the load (votes, summaries, verify)."""
        return self.table

    def for_replacement(self, replaces: list[str]) -> "PostgresTarget":
        return self
