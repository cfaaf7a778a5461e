"""The example job's totals sum each customer's amounts as whole cents in a 64-bit number
(orders_daily_totals.customers_of): a sum beyond it is never wrapped around nor loaded as
nothing; the day is refused, naming the customer. A day that reaches it needs about ten
million lines of the largest amount for one customer, so the tests start from the
per-order rows that dedupe gives."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from order_sql import customer_code
from orders_daily_totals import check_revenue_fits, customers_of, totals

DAY = "2041-03-04"
AT = datetime(2041, 3, 4, 8, tzinfo=timezone.utc)


def per_order(spark, orders):
    """dedupe's rows of (order_id, customer id, cents), each once and agreed."""
    return spark.createDataFrame(
        [(order_id, 1, True, customer_code(customer), cents, AT) for order_id, customer, cents in orders],
        "order_id string, copies long, agreed boolean, customer_code long, cents long, ordered_at timestamp")


def test_totals_are_the_cents_as_decimals(spark):
    customers = customers_of(per_order(spark, [("o1", "c0000007", 1234), ("o2", "c0000007", 1), ("o3", "c08", 99)]))
    rows = {r.customer_id: r for r in totals(customers, DAY).collect()}
    assert {c: (r.orders, r.revenue) for c, r in rows.items()} == {"c0000007": (2, Decimal("12.35")),
                                                                    "c08": (1, Decimal("0.99"))}
    assert dict(totals(customers, DAY).dtypes)["revenue"] == "decimal(22,2)"
    check_revenue_fits(customers, DAY)  # nothing near the column's limit: no error


def test_a_sum_beyond_64_bits_refuses_the_day_naming_the_customer(spark):
    big = 2 ** 62  # two of them are one past a long's largest value
    customers = customers_of(per_order(spark, [("o1", "c0000007", big), ("o2", "c0000007", big),
                                               ("o3", "c1", 500)]))
    with pytest.raises(ValueError) as refused:
        check_revenue_fits(customers, DAY)
    assert str(refused.value).startswith(f"revenue of c0000007 (beyond 92,233,720,368,547,758.07) on {DAY} is above "
                                         "999,999,999,999.99"), refused.value
    with pytest.raises(Exception) as failed:  # without the check, the totals themselves refuse it
        totals(customers, DAY).collect()
    assert f"revenue of c0000007 on {DAY} is beyond 92,233,720,368,547,758.07" in str(failed.value)


def test_a_sum_above_the_column_names_its_amount(spark):
    customers = customers_of(per_order(spark, [("o1", "c5", 99_999_999_999_999), ("o2", "c5", 2)]))
    with pytest.raises(ValueError, match=r"^revenue of c5 \(1,000,000,000,000.01\) on 2041-03-04 is above "):
        check_revenue_fits(customers, DAY)
