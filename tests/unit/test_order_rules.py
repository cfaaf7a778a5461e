"""The example's validation rules, line by line, without servers: every case of the
hostile catalog gets its verdict, and each reason names what is wrong with the value."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from hostile.catalog import catalog, file_lines
from order_rules import REASONS, check_line

DAY = date(2041, 3, 4)
CASES = catalog(DAY)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_line_of_the_catalog_gets_its_verdict(case):
    lines = [raw for name, data in case.files.items() if name not in case.skipped for raw in file_lines(name, data)]
    assert len(lines) == len(case.expect), case.name
    for raw, expected in zip(lines, case.expect):
        verdict = check_line(raw, DAY)
        if expected in ("valid", "duplicate", "conflicting_order"):  # the last two are decided across lines
            assert verdict.order is not None, (raw[:200], verdict)
        elif expected == "blank":
            assert verdict.blank
        else:
            assert expected in REASONS
            assert (verdict.reason, verdict.order) == (expected, None), (raw[:200], verdict)
            assert verdict.detail


@pytest.mark.parametrize("fields, detail", [
    ('"amount":1e400', "amount 1E+400 is above 9999999999.99"),
    ('"amount":100000000000.5', "amount 100000000000.5 is above 9999999999.99"),
    ('"amount":"NaN"', 'amount is a string ("NaN"), must be a JSON number'),
    ('"amount":true', "amount is a boolean (true), must be a JSON number"),
    ('"ordered_at":1763625600000', "ordered_at is a number (1763625600000); epoch times are not accepted"),
    ('"ordered_at":"2041-03-04T08:00:00"', 'ordered_at "2041-03-04T08:00:00" has no UTC offset'),
    ('"ordered_at":"2041-03-03T23:00:00Z"', 'ordered_at "2041-03-03T23:00:00Z" is on 2041-03-03 in UTC, '
                                            "not the load's day 2041-03-04"),
    ('"ordered_at":"2041-03-04T23:59:60Z"', "is not a valid time: second must be in 0..59"),
    ('"customer_id":"c0000001\\n"', 'customer_id "c0000001\\n" is not like c0001234'),
    ('"order_id":"a\\u0000"', 'order_id "a\\u0000" holds a control or line-break character (U+0000)'),
])
def test_reasons_name_the_value(fields, detail):
    base = {"order_id": '"o1"', "customer_id": '"c1"', "amount": "5", "ordered_at": '"2041-03-04T08:00:00Z"'}
    key = fields.split(":", 1)[0].strip('"')
    base[key] = fields.split(":", 1)[1]
    raw = ("{" + ",".join(f'"{k}":{v}' for k, v in base.items()) + "}").encode()
    verdict = check_line(raw, DAY)
    assert verdict.order is None and detail in verdict.detail, verdict


def test_invalid_utf8_names_the_byte():
    verdict = check_line(b'{"order_id":"caf\xe9"}', DAY)
    assert verdict.reason == "not_utf8" and "byte 0xe9 at offset 16" in verdict.detail


def test_two_objects_on_one_line_are_not_one_order():
    verdict = check_line(b'{"order_id":"a"}{"order_id":"b"}', DAY)
    assert verdict.reason == "not_json" and "more data after the JSON value at character 17" in verdict.detail


def test_a_valid_order_is_normalised():
    verdict = check_line(b'{"order_id":"o1","customer_id":"c1","amount":2.005,'
                         b'"ordered_at":"2041-03-04T10:00:00.1234567+02:00"}', DAY)
    order = verdict.order
    assert (order.order_id, order.customer_id, order.amount) == ("o1", "c1", Decimal("2.01"))
    assert order.ordered_at.isoformat() == "2041-03-04T08:00:00.123456+00:00"


def test_the_rules_pickle_by_value_after_use():
    """The job ships the rules to executors inside the pickled function (by value), also
    after the driver used them; the unpickled copy judges the same."""
    import order_rules
    from pyspark import cloudpickle

    check_line(b'{"order_id":"o1"}', DAY)
    cloudpickle.register_pickle_by_value(order_rules)
    try:
        copy = cloudpickle.loads(cloudpickle.dumps(order_rules.check_line))
    finally:
        cloudpickle.unregister_pickle_by_value(order_rules)
    raw = b'{"order_id":"o1","customer_id":"c1","amount":1,"ordered_at":"2041-03-04T00:00:00Z"}'
    assert copy(raw, DAY) == check_line(raw, DAY) and copy(raw, DAY).order is not None
