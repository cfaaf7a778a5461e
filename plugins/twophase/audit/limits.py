"""A rule's two thresholds: outside `warn` the audit warns, outside `error` the load aborts."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ..errors import SpecError

PASS, WARN, ERROR = "pass", "warn", "error"
VERDICTS = (PASS, WARN, ERROR)  # in rising severity


@dataclass(frozen=True)
class Bounds:
    """The values that are fine: min <= value <= max (None: no bound on that side)."""

    min: float | None = None
    max: float | None = None

    def __post_init__(self):
        # Checked where the rule is made (a DAG file: its parse fails naming it), not when
        # the audit runs: a NaN bound holds for no value and would only say "error".
        for side in ("min", "max"):
            value = getattr(self, side)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                      or math.isnan(value)):
                raise SpecError(f"bounds {side} must be a number or None, not {value!r}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise SpecError(f"bounds min {self.min} is above max {self.max}")

    def holds(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def describe(self) -> str:
        if self.min is None and self.max is None:
            return "any"
        if self.min is None:
            return f"<= {self.max:g}"
        if self.max is None:
            return f">= {self.min:g}"
        return f"{self.min:g}..{self.max:g}"

    def to_json(self) -> dict:
        return {"min": self.min, "max": self.max}


def bounds(value) -> Bounds:
    """A Bounds from a Bounds, a (min, max) pair or None (no bound)."""
    if value is None:
        return Bounds()
    if isinstance(value, Bounds):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return Bounds(*value)
    raise SpecError(f"thresholds are Bounds(min, max) or a (min, max) pair, not {value!r}")


def verdict(value: float | None, warn: Bounds, error: Bounds) -> str:
    """ERROR outside `error` (or nothing measured), WARN outside `warn`, else PASS."""
    if value is None or not error.holds(value):
        return ERROR
    return PASS if warn.holds(value) else WARN


def worst(verdicts) -> str:
    return max(verdicts, key=VERDICTS.index, default=PASS)
