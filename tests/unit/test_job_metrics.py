"""The job's metrics contract (twophase/metrics.py): what the product reads is checked when
the job ends, each problem named; the job's own figures pass as they are."""

from __future__ import annotations

import pytest

from twophase.errors import SpecError
from twophase.metrics import check, problems

GOOD = {"input_lines": 10, "rejected_lines": 3, "rejected_by_reason": {"bad amount": 2, "not JSON": 1},
        "skipped_files": 2, "skipped_bytes": 40, "skipped_paths": [{"path": "_x", "bytes": 40, "why": "hidden"}],
        "orders": 7, "input_files": 3, "expected_lines": 9, "skipped_lines": 0, "notes": ["any JSON", {"a": None}]}


def test_the_products_figures_and_the_jobs_own_pass():
    assert problems(GOOD) == [] and problems({}) == []
    check(GOOD)


@pytest.mark.parametrize("metrics, named", [
    ({"input_lines": 10, "rejected_line": 1}, "metric 'rejected_line' is not one the product reads; did you mean "
                                              "'rejected_lines'?"),
    ({"skiped_files": 1}, "did you mean 'skipped_files'?"),
    ({"input_lines": 1, "rejected_lines": 0, "Rejected_by_reason": {}}, "did you mean 'rejected_by_reason'?"),
    ({"input_lines": 10}, "metric 'rejected_lines' is missing: 'input_lines' needs it"),
    ({"rejected_lines": 1}, "metric 'input_lines' is missing: 'rejected_lines' needs it"),
    ({"input_lines": 3, "rejected_lines": 4}, "metric 'rejected_lines' (4) is above 'input_lines' (3)"),
    ({"input_lines": -1, "rejected_lines": 0}, "metric 'input_lines' must be a whole number of 0 or more, not -1"),
    ({"input_lines": 2.5, "rejected_lines": 0}, "not 2.5"),
    ({"input_lines": True, "rejected_lines": 0}, "not True"),
    ({"skipped_files": "2"}, "metric 'skipped_files' must be a whole number of 0 or more, not '2'"),
    ({"input_lines": 5, "rejected_lines": 3, "rejected_by_reason": {"a": 1}},
     "metric 'rejected_by_reason' adds up to 1 lines, but 'rejected_lines' is 3"),
    ({"rejected_by_reason": {"a": "1"}}, "must map each reason (a string) to a whole number of lines"),
    ({"rejected_by_reason": None}, "must map each reason"),
    ({"skipped_paths": [{"path": "x", "bytes": 1}]}, "metric 'skipped_paths' must be a list of"),
    ({"skipped_paths": "x"}, "metric 'skipped_paths' must be a list of"),
    ({"skipped_files": 0, "skipped_paths": [{"path": "x", "bytes": 1, "why": "hidden"}]},
     "metric 'skipped_paths' lists 1 files, more than 'skipped_files' (0)"),
    ({"orders": float("nan")}, "metric 'orders' cannot be logged as JSON"),
    ({"when": object()}, "metric 'when' cannot be logged as JSON"),
    ({1: 2}, "metric name 1 is not a string"),
    ([("input_lines", 1)], "metrics must be a dict of names to values, not list"),
])
def test_each_breach_is_named(metrics, named):
    found = problems(metrics)
    assert any(named in p for p in found), found
    with pytest.raises(SpecError, match="the job's metrics break their contract"):
        check(metrics)


def test_every_breach_is_named_at_once():
    found = problems({"input_lines": 10, "rejected_line": 1, "skipped_files": -2})
    assert len(found) == 3, found
