"""PostgresTarget: a table a load writes, as plain data (stored with the load in the
transaction log). Depends only on the standard library and twophase.errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import SpecError
from ...schema import check as check_schema
from ..target_rules import IDENT, check_names, check_table


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
    """

    table: str
    mode: str = "append"
    replace_where: dict[str, Any] = field(default_factory=dict)
    connection: str = ""
    frame: str = ""
    prepared: bool | None = None
    frame_schema: dict[str, str] = field(default_factory=dict)
    kind = "postgres"

    def __post_init__(self):
        check_names(self)
        object.__setattr__(self, "frame_schema",
                           check_schema(self.frame_schema, f"table {self.table}") if self.frame_schema else {})
        check_table(self, "schema.table")
        if self.prepared not in (None, True, False):
            raise SpecError(f"table {self.table}: prepared must be None (as the server allows), True or False, "
                            f"got {self.prepared!r}")
        for column in self.replace_where:
            if not IDENT.match(column):
                raise SpecError(f"replace_where column {column!r} is not a plain identifier")

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
