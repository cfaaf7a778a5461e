"""The audit's rules, each kind at pass, warn and error, over staged rows in memory; the
report's JSON against its documented schema; the vote's reading of the verdict."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import jsonschema
import pyarrow as pa
import pytest

from twophase.audit import (ArrowRows, AuditInput, AuditReport, Bounds, DuplicateKeys, NullShare, PythonRule, RejectedShare, RowCount, RowCountChange, SqlRule, ValueRange)
from twophase.audit.limits import verdict, worst
from twophase.audit.report import audit_reasons, schema
from twophase.errors import SpecError

T = "analytics.t"
ROWS = pa.table({"id": [1, 2, 2, 3, 4, 5, 6, 7, 8, 9], "amount": [5, 10, None, 20, 30, 40, 50, 60, 1000, -1]})


def audit_input(previous=None, metrics=None) -> AuditInput:
    return AuditInput({T: ROWS.num_rows}, {"input_lines": 100, "rejected_lines": 4} if metrics is None else metrics,
                      lambda target: ArrowRows(target, ROWS) if target == T else None, previous)


# rule -> (measured value, warn bounds and error bounds giving each verdict)
CASES = {
    "row_count": (RowCount(T, error=(1, None)), 10),
    "rejected_share": (RejectedShare(), 0.04),
    "null_share": (NullShare(T, "amount"), 0.1),
    "duplicate_keys": (DuplicateKeys(T, ("id",)), 1),
    "value_range": (ValueRange(T, "amount", 0, 100), 2),
    "row_count_change": (RowCountChange(T, warn=(-1, 1)), 0.25),
    "python": (PythonRule("max amount", T, lambda t: max(v for v in t.column("amount").to_pylist() if v is not None)),
               1000),
}


@pytest.mark.parametrize("kind", list(CASES))
@pytest.mark.parametrize("expect", ["pass", "warn", "error"])
def test_each_rule_kind_measures_and_judges_at_every_level(kind, expect):
    rule, value = CASES[kind]
    thresholds = {"pass": dict(warn=(None, value), error=(None, value)),
                  "warn": dict(warn=(None, value / 2), error=(None, value)),
                  "error": dict(warn=(None, value / 2), error=(None, value / 2))}[expect]
    judged = dataclasses.replace(rule, **thresholds)
    result = judged.check(audit_input(previous={T: 8}))
    assert result.value == pytest.approx(value), result.detail
    assert result.verdict == expect, result.describe()


def test_a_rule_that_cannot_be_measured_is_an_error_naming_why():
    missing_column = NullShare(T, "nope").check(audit_input())
    assert (missing_column.verdict, missing_column.value) == ("error", None)
    assert "has no column 'nope'" in missing_column.detail
    no_metrics = RejectedShare(error=(None, 1)).check(audit_input(metrics={}))
    assert no_metrics.verdict == "error" and "input_lines" in no_metrics.detail
    sql_on_arrow = SqlRule("big", T, "select count(*) from {staged}").check(audit_input())
    assert sql_on_arrow.verdict == "error" and "not staged in SQL" in sql_on_arrow.detail
    failing = PythonRule("boom", T, lambda t: 1 / 0).check(audit_input())
    assert failing.verdict == "error" and "ZeroDivisionError" in failing.detail
    unknown = RowCount("other.table", error=(1, None)).check(audit_input())
    assert unknown.verdict == "error" and "no target 'other.table'" in unknown.detail


def test_a_rule_that_does_not_finish_in_time_is_an_error_and_the_audit_goes_on():
    """A Python rule that never returns (here: until the test lets it go) is judged after its
    time limit, given in seconds, and the rules after it are measured."""
    release = threading.Event()
    hanging = PythonRule("hangs", T, lambda t: release.wait(60), time_limit=0.2)
    started = time.monotonic()
    results = [rule.check(audit_input()) for rule in (hanging, RowCount(T, error=(1, None)))]
    took = time.monotonic() - started
    release.set()
    assert [r.verdict for r in results] == ["error", "pass"]
    assert results[0].detail == "not measurable: it did not finish within its time limit of 0.2 s"
    assert took < 5, f"the audit waited {took:.1f} s for a rule limited to 0.2 s"


@pytest.mark.parametrize("limit", [0, -1, float("nan"), float("inf"), "60", True])
def test_a_time_limit_that_is_no_positive_number_is_refused_where_the_rule_is_made(limit):
    with pytest.raises(SpecError, match="time_limit must be a positive number of seconds"):
        RowCount(T, time_limit=limit)


# (rule without thresholds, the value it measures on ROWS, its verdict there)
BY_DEFAULT = {
    "rejected_share": (RejectedShare(), 0.04, "error"),
    "null_share": (NullShare(T, "amount"), 0.1, "error"),
    "duplicate_keys": (DuplicateKeys(T, "id"), 1, "error"),
    "value_range": (ValueRange(T, "amount", -1, 1000), 0, "pass"),
    "sql": (SqlRule("no rows", T, "select count(*) from {staged}"), None, "error"),  # ROWS are no SQL table
    "python": (PythonRule("negative amounts", T, lambda t: sum(1 for v in t.column("amount").to_pylist()
                                                                if v is not None and v < 0)), 1, "error"),
}


@pytest.mark.parametrize("kind", list(BY_DEFAULT))
def test_a_rule_given_no_thresholds_fails_on_any_bad_row(kind):
    """As dbt's tests: what the rule counts is bad, so any of it is an error."""
    rule, value, expect = BY_DEFAULT[kind]
    assert rule.error == Bounds(None, 0) and rule.warn == Bounds()
    result = rule.check(audit_input())
    assert (result.value, result.verdict) == (value, expect), result.describe()
    if value is not None:
        assert dataclasses.replace(rule, error=(None, value)).check(audit_input()).verdict == "pass"


@pytest.mark.parametrize("rule", [lambda: RowCount(T), lambda: RowCountChange(T)])
def test_a_rule_whose_value_is_no_count_of_bad_rows_needs_thresholds(rule):
    with pytest.raises(SpecError, match=r"audit rule row_count(_change)?\(analytics.t\) has no thresholds: give it "
                                        r"warn=\(min, max\), error=\(min, max\) or both"):
        rule()


@pytest.mark.parametrize("thresholds", [dict(error=(None, None)), dict(warn=Bounds(), error=Bounds()),
                                        dict(warn=(None, None))])
def test_thresholds_that_hold_every_value_are_refused(thresholds):
    with pytest.raises(SpecError, match=r"null_share\(analytics.t.amount\): its thresholds hold every value"):
        NullShare(T, "amount", **thresholds)
    assert NullShare(T, "amount", warn=(None, 0)).error == Bounds(), "a rule given warn only only warns"


def test_the_first_load_of_a_pipeline_has_no_change_to_measure():
    result = RowCountChange(T, error=(-0.5, 0.5)).check(audit_input(previous=None))
    assert (result.value, result.verdict) == (0.0, "pass") and "no earlier committed load" in result.detail


def test_thresholds_and_verdicts():
    assert verdict(5, Bounds(0, 10), Bounds(0, 20)) == "pass"
    assert verdict(15, Bounds(0, 10), Bounds(0, 20)) == "warn"
    assert verdict(-1, Bounds(0, 10), Bounds(None, 20)) == "warn"
    assert verdict(21, Bounds(0, 10), Bounds(0, 20)) == "error"
    assert verdict(None, Bounds(), Bounds()) == "error"
    assert worst(["pass", "error", "warn"]) == "error" and worst([]) == "pass"
    with pytest.raises(SpecError, match="min 2 is above max 1"):
        Bounds(2, 1)
    with pytest.raises(SpecError, match="thresholds are Bounds"):
        RowCount(T, warn=5)


@pytest.mark.parametrize("pair, named", [
    ((float("nan"), 1), "bounds min must be a number or None, not nan"),
    ((0, float("nan")), "bounds max must be a number or None, not nan"),
    (("0", 1), "bounds min must be a number or None, not '0'"),
    ((0, True), "bounds max must be a number or None, not True"),
])
def test_a_threshold_that_is_no_number_is_refused_where_the_rule_is_made(pair, named):
    """In a DAG file, the parse fails naming it, rather than the audit failing later with
    a rule that can only say error (NaN compares false with everything)."""
    with pytest.raises(SpecError, match=named):
        RowCount(T, error=pair)
    assert RowCount(T, error=(0, float("inf"))).error.holds(10**12)


def test_the_report_follows_its_schema_and_the_vote_reads_its_errors():
    rules = [RowCount(T, warn=(20, None)), NullShare(T, "amount", error=(None, 0.05)), RejectedShare(error=(0, 0.05)),
             SqlRule("sql", T, "select 1 from {staged}")]
    report = AuditReport("pipe.load", tuple(r.check(audit_input()) for r in rules), {T: 10}, {"bad amount": 4})
    doc = report.to_json()
    jsonschema.validate(doc, schema())
    assert doc["verdict"] == report.verdict == "error"
    assert [r["verdict"] for r in doc["rules"]] == ["warn", "error", "pass", "error"]
    reasons = audit_reasons(doc, required=True)
    assert len(reasons) == 2 and reasons[0].startswith("audit: null_share(analytics.t.amount) is 0.1, outside <= 0.05")
    assert audit_reasons(None, required=False) == []
    assert "the audit did not run" in audit_reasons(None, required=True)[0]
    lines = report.lines()
    assert lines[0] == "audit of load pipe.load: ERROR (4 rules: 1 pass, 1 warn, 2 error)"
    assert any("WARN  row_count(analytics.t): 10" in line for line in lines)
    assert report.summary() == {"verdict": "error", "rules": {r.rule: r.verdict for r in report.results}}
    stored = json.loads(json.dumps(doc))  # as the log gives it back
    assert AuditReport.from_json(stored) == report and AuditReport.from_json(stored).lines() == lines
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**doc, "verdict": "maybe"}, schema())


def test_rules_over_nothing_staged_measure_nothing_wrong():
    empty = AuditInput({T: 0}, {}, lambda target: ArrowRows(target, pa.Table.from_pylist([])))
    for rule in (NullShare(T, "amount", error=(0, 0)), DuplicateKeys(T, ("id",), error=(0, 0)),
                 ValueRange(T, "amount", 0, 1, error=(0, 0))):
        result = rule.check(empty)
        assert (result.value, result.verdict) == (0, "pass"), result.describe()


# rule -> the rows it counts (ids), for the quarantine; None: it counts no rows of its own
FAILING = {
    "row_count": None, "rejected_share": None, "row_count_change": None, "python": None,
    "null_share": [2],
    "duplicate_keys": [2],  # the second row of id 2
    "value_range": [8, 9],
}


@pytest.mark.parametrize("kind", list(FAILING))
def test_row_level_rules_hand_over_the_rows_they_counted_capped(kind):
    rule, _ = CASES[kind]
    rows = rule.failing(audit_input(), 10)
    if FAILING[kind] is None:
        assert rows is None
        return
    assert [r["id"] for r in rows] == FAILING[kind]
    counted = rule.check(audit_input()).value
    assert len(rows) == (counted * ROWS.num_rows if kind == "null_share" else counted)  # a share of the rows
    assert all(set(r) == {"id", "amount"} for r in rows)
    assert len(rule.failing(audit_input(), 1)) == 1 and rule.failing(audit_input(), 0) == []


def test_records_whose_keys_differ_keep_every_column_null_where_missing():
    # A staged JSON value leaves out its nulls: the first record may lack a column others have.
    rows = ArrowRows.of_records("topic", [{"id": 1}, {"id": 2, "note": "x"}, {"id": 3, "note": None}])
    assert rows.table.column_names == ["id", "note"] and rows.nulls("note") == 2
    assert [r["id"] for r in NullShare("topic", "note").failing(
        AuditInput({"topic": 3}, {}, lambda target: rows), 10)] == [1, 3]
    assert ArrowRows.of_records("topic", []).count() == 0
