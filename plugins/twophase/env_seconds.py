"""A duration read from the environment: one number of seconds, refused naming its variable."""

from __future__ import annotations

import math
import os

from .errors import SpecError


def seconds(name: str, default: float, zero_allowed: bool = False) -> float:
    """The seconds environment variable `name` holds (`default` when it is unset): a finite
    number above 0 (or 0 too, when `zero_allowed`), else SpecError naming it."""
    raw = os.environ.get(name)
    if raw is None:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value >= 0 if zero_allowed else value > 0)):
        kind = "a number of seconds (0 or more)" if zero_allowed else "a positive number of seconds"
        raise SpecError(f"{name} must be {kind}, not {raw!r}")
    return value
