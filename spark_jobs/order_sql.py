"""The example jobs' fast paths: the lines that are plainly valid orders, judged inside
Spark's JVM, each in one scan of its bytes by a Java function the job registers in its
session (jvm/OrderLines.java; twophase.spark.java_functions). Every other line goes to the
job's own rules.

The streaming job's (with_fast_event): a record whose value is plainly a valid order event
as orders_stream_totals.judged finds it, with its values; where the session has no Java,
every record is judged by those rules (from_json and Spark's casts).

The daily job's (with_fast_order): the lines that are plainly valid orders of the day;
every other line goes to order_rules.check_line, whose verdict is the rule
(orders_daily_totals.classify). It has two forms with one grammar: OrderLines.Daily, and
line_pattern, one regular expression over the whole line, which a session without Java
uses (no JDK beside the driver: a warning says so) at a fifth of the speed (1M lines:
0.4 s against 2.0-2.4 s). A line takes the fast path only when its form leaves no doubt
about the verdict:

- at most MAX_FAST_CHARS characters, one JSON object of one level and nothing around it:
  keys of a-z and _, values that are strings of printable ASCII without quote or
  backslash, or numbers without exponent; "," or ", " between members, ":" or ": "
  after keys;
- order_id, customer_id, amount and ordered_at each exactly once, in this order (the
  sample's and most producers' order), members of other keys anywhere around them;
- order_id: 1 to 200 printable ASCII characters, no space;
- customer_id: a 'c' and 1 to 12 digits;
- amount: at most 10 digits before the point and 2 after, not negative (so it is its own
  value in cents, within decimal(12,2));
- ordered_at: on the load's day, YYYY-MM-DDTHH:MM:SS[.f to ffffff]Z, a valid time of day.

Such a line is valid under order_rules with the same four values, which
tests/core/test_order_sql.py checks line by line, for both forms, on the hostile catalog
and on near misses of every condition (and the two forms against each other on random
edits of plain orders). Anything else (a different spelling of a valid order, and
every faulty line) is judged by check_line, so verdicts, reasons and details are the
Python rules' own.

The job carries an order as ORDER: its id, and three numbers that Spark aggregates in
hash tables and sums without decimals (a string or a wide decimal in an aggregate's state
makes it sort or box every value): the customer's code (customer_code), the amount in
cents, and the instant.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from twophase.spark import java_functions

MAX_FAST_CHARS = 4096
JAVA_SOURCE = Path(__file__).with_name("jvm") / "OrderLines.java"  # the fast paths in Java
FAST_ORDER, FAST_EVENT = "twophase_example_fast_order", "twophase_example_fast_event"
JAVA_FUNCTIONS = {
    FAST_ORDER: ("example.OrderLines$Daily", "struct<order_id string, customer_code long, cents long, "
                                            "ordered_at_micros long>"),
    FAST_EVENT: ("example.OrderLines$Event", "struct<customer_id string, amount decimal(12,2), "
                                            "ordered_at_micros long>"),
}
FIELDS = ("order_id", "customer_id", "amount", "ordered_at")
ORDER = ("order_id", "customer_code", "cents", "ordered_at")  # an order as the job carries it
ORDER_DDL = "order_id string, customer_code long, cents long, ordered_at timestamp"
_STRING = r'"[\x20\x21\x23-\x5b\x5d-\x7e]*+"'  # printable ASCII but " and \
_NUMBER = r"-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+"
_OTHER = rf'"(?!(?:{"|".join(FIELDS)})")[a-z_]{{1,32}}+": ?+(?:{_STRING}|{_NUMBER})'  # a member of another key
_MORE = rf"(?:{_OTHER}, ?+)*+"  # other members before the next field

# A valid customer id is a 'c' and 1 to 12 digits (order_rules): its digit count times
# 10^12 plus its digits is a number that is the same id, leading zeros kept.
_DIGITS = 10 ** 12


def customer_code(customer_id: str) -> int:
    """The code of a valid customer id."""
    return (len(customer_id) - 1) * _DIGITS + int(customer_id[1:])


def customer_of(code: str):
    """The customer id of the code in column `code` (a Column)."""
    return F.concat(F.lit("c"), F.lpad((F.col(code) % _DIGITS).cast("string"),
                                       (F.col(code) / _DIGITS).cast("int"), "0"))


def coded(order) -> tuple:
    """An order_rules.Order as ORDER values."""
    return order.order_id, customer_code(order.customer_id), int(order.amount * 100), order.ordered_at


def line_pattern(day: date) -> str:
    """The fast path's whole line: the four fields in this order, each once, other flat
    members anywhere around them. Groups: 1 the order id, 2 the customer id's digits, 3
    and 4 the amount's whole part and its fraction (none, or 1 or 2 digits), 5 the time."""
    return (rf'^\{{{_MORE}"order_id": ?+"([\x21\x23-\x5b\x5d-\x7e]{{1,200}}+)", ?+{_MORE}'
            rf'"customer_id": ?+"c([0-9]{{1,12}}+)", ?+{_MORE}'
            rf'"amount": ?+(0|[1-9][0-9]{{0,9}}+)(?:\.([0-9]{{1,2}}+))?+, ?+{_MORE}'
            rf'"ordered_at": ?+"({day.isoformat()}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{{1,6}}+)?+Z)"'
            rf"(?:, ?+{_OTHER})*+\}}\z")  # \z, not $: $ also matches before a final line terminator


def in_java(spark, instead: str) -> bool:
    """Whether the fast paths are registered in `spark`'s session (a warning says what the
    job does `instead` when they cannot be; same verdicts, slower)."""
    return java_functions.register(spark, JAVA_SOURCE, JAVA_FUNCTIONS, f"{instead} (slower, same verdicts)")


def with_fast_event(records: DataFrame, value: str) -> DataFrame:
    """`records` with column `_fast`: struct(customer_id, amount decimal(12,2),
    ordered_at_micros) of a record whose value (column `value`, bytes) is plainly a valid
    order event, else null. Call it where in_java holds."""
    return records.withColumn("_fast", F.call_function(FAST_EVENT, F.col(value)))


def with_fast_order(lines: DataFrame, raw: str, day: date, java: bool = True) -> DataFrame:
    """`lines` with the ORDER columns: the order when the line in column `raw` (its bytes)
    takes the fast path, else nulls (order_id is null exactly when it does not). Judged by
    OrderLines.Daily where the session can register it (`java`), else by line_pattern."""
    if java and in_java(lines.sparkSession, "the daily job's fast path matches lines by a regular expression"):
        found = F.call_function(FAST_ORDER, F.col(raw), F.lit(day.isoformat()))
        return (lines.withColumn("_order", found)
                .withColumns({c: F.col(f"_order.{c}") for c in ORDER[:-1]})
                .withColumn("ordered_at", F.timestamp_micros("_order.ordered_at_micros"))
                .drop("_order"))
    return _with_fast_order_matched(lines, raw, day)


def _with_fast_order_matched(lines: DataFrame, raw: str, day: date) -> DataFrame:
    """with_fast_order by line_pattern, in Spark SQL."""
    text = F.col(raw).cast("string")
    # A line of the pattern, replaced, is its five values between tabs (no value holds one);
    # any other line stays as it was (the pattern spans whole lines), so a line without a
    # tab is of the pattern exactly when it comes back as five values. (That it came back
    # different proves nothing: the replace reads the line as Java's UTF-16, so bytes that
    # are not UTF-8 come back as U+FFFD.) Each step in a select of its own, so that the
    # replace and the split run once per line (in one expression, Spark evaluates them
    # again for each value taken).
    replaced = F.split(F.regexp_replace(text, line_pattern(day), "$1\t$2\t$3\t$4\t$5"), "\t")
    fast = (F.size("_values") == 5) & (F.instr(text, "\t") == 0) & (F.octet_length(raw) <= MAX_FAST_CHARS)
    v = F.col("_values")
    digits = v[1]
    return (lines.withColumn("_values", replaced)
            .withColumn("_values", F.when(fast, v))
            .withColumn("order_id", v[0])
            .withColumn("customer_code", F.length(digits).cast("long") * _DIGITS + digits.cast("long"))
            .withColumn("cents", v[2].cast("long") * 100 + F.rpad(v[3], 2, "0").cast("long"))
            .withColumn("ordered_at", v[4].cast("timestamp"))
            .drop("_values"))
