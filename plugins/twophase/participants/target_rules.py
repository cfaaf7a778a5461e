"""What every kind of target shares: its write modes and the checks of its names. Plain
data, no driver, so target modules load without any client library."""

from __future__ import annotations

import re

from ..errors import SpecError

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
WRITE_MODES = ("append", "replace")


def check_table(target, parts: str, where_needed: bool = True) -> None:
    """Raise SpecError unless a table target's name is `<parts>` (e.g. 'schema.table') of two
    plain identifiers, and its mode is a write mode (replace with its replace_where, unless
    not `where_needed`: the target knows which rows it replaces otherwise)."""
    pieces = target.table.split(".")
    if len(pieces) != 2 or not all(IDENT.match(p) for p in pieces):
        raise SpecError(f"{target.kind} table {target.table!r} must be {parts} with plain identifiers")
    if target.mode not in WRITE_MODES:
        raise SpecError(f"write mode {target.mode!r} is not one of {WRITE_MODES}")
    if target.mode == "replace" and where_needed and not target.replace_where:
        raise SpecError("write mode 'replace' needs replace_where: the columns and values of the rows to replace")


def check_names(target) -> None:
    """Raise SpecError unless the target's `connection` and `frame` are names (or empty)."""
    for name in ("connection", "frame"):
        value = getattr(target, name)
        if not isinstance(value, str) or (value and not _NAME.match(value)):
            raise SpecError(f"{target.kind} target {name} {value!r} must be a name of letters, digits, '_', '.', "
                            "'-' (or empty for the default)")
