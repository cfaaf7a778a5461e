"""What every kind of target shares: its write modes and the checks of its names. Plain
data, no driver, so target modules load without any client library."""

from __future__ import annotations

import re

from ..errors import SpecError

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
WRITE_MODES = ("append", "replace")


def check_names(target) -> None:
    """Raise SpecError unless the target's `connection` and `frame` are names (or empty)."""
    for name in ("connection", "frame"):
        value = getattr(target, name)
        if not isinstance(value, str) or (value and not _NAME.match(value)):
            raise SpecError(f"{target.kind} target {name} {value!r} must be a name of letters, digits, '_', '.', "
                            "'-' (or empty for the default)")
