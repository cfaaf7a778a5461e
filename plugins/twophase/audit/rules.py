"""The audit's rules: each measures one value of a load and judges it against its warn
and error thresholds (limits.Bounds, or (min, max) pairs).

A rule given neither threshold fails by default where it counts something bad (null,
duplicate or out-of-range rows, rejected lines, a SQL or Python rule's number: an error
above 0, as a dbt test fails on any row); RowCount and RowCountChange have no such value
and refuse to be made without one. Thresholds that hold every value are refused too: a
rule that can never warn or fail checks nothing.

    RowCount(on)                        rows Spark computed for the target `on`
    RejectedShare()                     rejected input lines / input lines (the job's metrics)
    NullShare(on, column)               share of staged rows whose column is null
    DuplicateKeys(on, columns)          staged rows beyond the first of each key
    ValueRange(on, column, low, high)   staged rows whose column is outside low..high
    RowCountChange(on)                  (rows - last committed load's rows) / those, same pipeline
    SqlRule(label, on, query)           a number from SQL over the staged rows ({staged})
    PythonRule(label, on, fn)           fn(pyarrow.Table of the staged rows) -> a number

A rule that cannot be measured (a column the target lacks, SQL on a topic, a query that
fails) is an error naming why: a rule that cannot be checked never passes silently. So is
a rule that does not finish within its `time_limit` (seconds, default 300): the audit
goes on without waiting for it (a SQL rule's query is also cancelled by its server then).
The row-level rules (NullShare, DuplicateKeys, ValueRange) also hand over the rows they
counted (`failing`), which the audit keeps in the quarantine when the rule does not pass.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Mapping

from ..errors import ServerUnreachable, SpecError, root_cause
from .limits import Bounds, bounds, verdict
from .staged import NotMeasurable, StagedRows


@dataclass(frozen=True)
class AuditInput:
    """What rules measure: Spark's rows per target, the job's metrics, each target's staged
    rows (`staged(target)`, None when its kind cannot be read), and the rows per target of
    the pipeline's last committed load (None: there is none)."""

    expected: Mapping[str, int]
    metrics: Mapping[str, object]
    staged: Callable[[str], StagedRows | None]
    previous: Mapping[str, int] | None = None

    def rows_of(self, target: str) -> StagedRows:
        if target not in self.expected:
            raise NotMeasurable(f"the load has no target {target!r} (it has {', '.join(self.expected)})")
        staged = self.staged(target)
        if staged is None:
            raise NotMeasurable(f"the staged rows of {target} cannot be read before the commit")
        return staged


@dataclass(frozen=True)
class Result:
    """One rule's line of the report."""

    rule: str
    kind: str
    target: str | None
    value: float | None
    warn: Bounds
    error: Bounds
    verdict: str
    detail: str = ""

    def to_json(self) -> dict:
        return {"rule": self.rule, "kind": self.kind, "target": self.target, "value": self.value,
                "warn": self.warn.to_json(), "error": self.error.to_json(), "verdict": self.verdict,
                "detail": self.detail}

    def describe(self) -> str:
        value = "not measured" if self.value is None else f"{self.value:g}"
        return (f"{self.verdict.upper():<5} {self.rule}: {value} (warn outside {self.warn.describe()}, error outside "
                f"{self.error.describe()})" + (f"; {self.detail}" if self.detail else ""))


DEFAULT_TIME_LIMIT_S = 300.0


@dataclass(frozen=True)
class Rule:
    """One measure of a load, judged: an error outside `error`, else a warning outside
    `warn` (each a Bounds or a (min, max) pair, None for no bound on that side), else a
    pass. A measure that fails, or takes longer than `time_limit` seconds, is an error."""

    warn: Bounds | None = field(default=None, kw_only=True)
    error: Bounds | None = field(default=None, kw_only=True)
    time_limit: float = field(default=DEFAULT_TIME_LIMIT_S, kw_only=True)  # seconds one measure may take
    kind: ClassVar[str] = "rule"
    # The error thresholds of a rule given none: what it counts is bad, so any of it fails.
    # None: the rule's value is no count of bad things, and it must be given thresholds.
    default_error: ClassVar[Bounds | None] = Bounds(max=0)

    def __post_init__(self):
        limit = self.time_limit
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit <= 0:
            raise SpecError(f"audit rule {self.name}: time_limit must be a positive number of seconds, not {limit!r}")
        if self.warn is None and self.error is None:
            if self.default_error is None:
                raise SpecError(f"audit rule {self.name} has no thresholds: give it warn=(min, max), error=(min, max) "
                                "or both (without them it could never fail)")
            object.__setattr__(self, "error", self.default_error)
        object.__setattr__(self, "warn", bounds(self.warn))
        object.__setattr__(self, "error", bounds(self.error))
        if self.warn == Bounds() and self.error == Bounds():
            raise SpecError(f"audit rule {self.name}: its thresholds hold every value, so it could never warn or fail")

    @property
    def target(self) -> str | None:
        return getattr(self, "on", None)

    @property
    def name(self) -> str:
        return f"{self.kind}({self.target})" if self.target else self.kind

    def measure(self, audit: AuditInput) -> tuple[float, str]:
        """(value, detail)."""
        raise NotImplementedError

    def failing(self, audit: AuditInput, limit: int) -> list[dict] | None:
        """The staged rows this rule counted (at most `limit`), for the quarantine; None
        when the rule measures no rows of its own (a count, a share of input lines, SQL)."""
        return None

    def check(self, audit: AuditInput) -> Result:
        try:
            value, detail = self._measured_in_time(audit)
        except NotMeasurable as exc:
            value, detail = None, f"not measurable: {exc}"
        except ServerUnreachable:
            raise  # the audit step retries; a server down says nothing about the data
        except Exception as exc:  # noqa: BLE001 - a rule that fails to measure is an error of the audit, named
            value, detail = None, f"failed to measure: {root_cause(exc)}"
        return Result(self.name, self.kind, self.target, value, self.warn, self.error,
                      verdict(value, self.warn, self.error), detail)

    def _measured_in_time(self, audit: AuditInput) -> tuple[float, str]:
        """measure(), in a thread the audit stops waiting for after `time_limit` (a thread
        cannot be killed: one that never returns is left behind, and ends with the task)."""
        done: dict = {}

        def run() -> None:
            try:
                done["value"] = self.measure(audit)
            except BaseException as exc:  # noqa: BLE001 - raised again in the audit's thread
                done["error"] = exc

        worker = threading.Thread(target=run, name=f"audit rule {self.name}", daemon=True)
        worker.start()
        worker.join(self.time_limit)
        if worker.is_alive():
            raise NotMeasurable(f"it did not finish within its time limit of {self.time_limit:g} s")
        if "error" in done:
            raise done["error"]
        return done["value"]


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@dataclass(frozen=True)
class RowCount(Rule):
    """The rows Spark computed for the target `on`. Needs thresholds."""

    on: str
    kind: ClassVar[str] = "row_count"
    default_error: ClassVar[Bounds | None] = None

    def measure(self, audit):
        if self.on not in audit.expected:
            raise NotMeasurable(f"the load has no target {self.on!r}")
        return audit.expected[self.on], "rows Spark computed"


@dataclass(frozen=True)
class RejectedShare(Rule):
    """Rejected input lines / input lines, from the job's metrics (rejected_lines and
    input_lines). Without thresholds, any rejected line fails the load."""

    kind: ClassVar[str] = "rejected_share"

    def measure(self, audit):
        metrics = audit.metrics
        if "input_lines" not in metrics or "rejected_lines" not in metrics:
            raise NotMeasurable("the job reported no input_lines and rejected_lines")
        return _share(metrics["rejected_lines"], metrics["input_lines"]), (
            f"{metrics['rejected_lines']} of {metrics['input_lines']} input lines rejected")


@dataclass(frozen=True)
class NullShare(Rule):
    """The share of the staged rows of `on` whose `column` is null. Without thresholds, any
    such row fails the load."""

    on: str
    column: str
    kind: ClassVar[str] = "null_share"

    @property
    def name(self) -> str:
        return f"{self.kind}({self.on}.{self.column})"

    def measure(self, audit):
        rows = audit.rows_of(self.on)
        nulls, total = rows.nulls(self.column), rows.count()
        return _share(nulls, total), f"{nulls} of {total} rows have no {self.column}"

    def failing(self, audit, limit):
        return audit.rows_of(self.on).null_rows(self.column, limit)


@dataclass(frozen=True)
class DuplicateKeys(Rule):
    """The staged rows of `on` beyond the first of each key (`columns`, one name or
    several). Without thresholds, any repeated key fails the load."""

    on: str
    columns: tuple[str, ...]
    kind: ClassVar[str] = "duplicate_keys"

    def __post_init__(self):
        object.__setattr__(self, "columns", (self.columns,) if isinstance(self.columns, str) else tuple(self.columns))
        if not self.columns:
            raise SpecError("DuplicateKeys needs at least one key column")
        super().__post_init__()

    @property
    def name(self) -> str:
        return f"{self.kind}({self.on}: {', '.join(self.columns)})"

    def measure(self, audit):
        return audit.rows_of(self.on).duplicates(self.columns), f"rows repeating a key ({', '.join(self.columns)})"

    def failing(self, audit, limit):
        return audit.rows_of(self.on).duplicate_rows(self.columns, limit)


@dataclass(frozen=True)
class ValueRange(Rule):
    """The staged rows of `on` whose `column` is outside low..high (None: no bound on that
    side). Without thresholds, any such row fails the load."""

    on: str
    column: str
    low: float | None = None
    high: float | None = None
    kind: ClassVar[str] = "value_range"

    @property
    def name(self) -> str:
        return f"{self.kind}({self.on}.{self.column} in {Bounds(self.low, self.high).describe()})"

    def measure(self, audit):
        outside = audit.rows_of(self.on).outside(self.column, self.low, self.high)
        return outside, f"rows with {self.column} outside {Bounds(self.low, self.high).describe()}"

    def failing(self, audit, limit):
        return audit.rows_of(self.on).outside_rows(self.column, self.low, self.high, limit)


@dataclass(frozen=True)
class RowCountChange(Rule):
    """(rows - the pipeline's last committed load's rows) / those, for the target `on`;
    0 when there is no such load. Needs thresholds."""

    on: str
    kind: ClassVar[str] = "row_count_change"
    default_error: ClassVar[Bounds | None] = None

    def measure(self, audit):
        if self.on not in audit.expected:
            raise NotMeasurable(f"the load has no target {self.on!r}")
        rows = audit.expected[self.on]
        before = (audit.previous or {}).get(self.on)
        if not before:
            return 0.0, "no earlier committed load of this pipeline with rows to compare with"
        return (rows - before) / before, f"{rows} rows against {before} in the last committed load"


@dataclass(frozen=True)
class SqlRule(Rule):
    """A number from `query`, SQL over the staged rows of the Postgres target `on`, read
    as {staged}, in a read-only transaction. `label` names the rule in the report. Without
    thresholds, a number above 0 fails the load (a query that counts failing rows, as a
    dbt test)."""

    label: str
    on: str
    query: str
    kind: ClassVar[str] = "sql"

    @property
    def name(self) -> str:
        return self.label

    def measure(self, audit):
        if "{staged}" not in self.query:
            raise SpecError(f"SqlRule {self.label!r}: its query must read the staged rows as {{staged}}")
        value = audit.rows_of(self.on).sql(self.query, self.time_limit)
        if value is None:
            raise NotMeasurable("the query returned no value")
        return float(value), "from SQL over the staged rows"


@dataclass(frozen=True)
class PythonRule(Rule):
    """`fn(pyarrow.Table of the staged rows of `on`)`, a number. `label` names the rule in
    the report. Without thresholds, a number above 0 fails the load."""

    label: str
    on: str
    fn: Callable = field(compare=False)
    kind: ClassVar[str] = "python"

    @property
    def name(self) -> str:
        return self.label

    def measure(self, audit):
        value = self.fn(audit.rows_of(self.on).arrow())
        return float(value), f"{getattr(self.fn, '__name__', 'fn')} over the staged rows"
