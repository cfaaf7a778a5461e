"""The example's fast path, in Spark SQL: the lines that are plainly valid orders of the
day, judged inside Spark's JVM. Every other line goes to order_rules.check_line, whose
verdict is the rule (orders_daily_totals.classify).

A line takes the fast path only when its form leaves no doubt about the verdict (one
regular expression over the whole line, line_pattern):

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
tests/core/test_order_sql.py checks line by line on the hostile catalog and on near
misses of every condition. Anything else (a different spelling of a valid order, and
every faulty line) is judged by check_line, so verdicts, reasons and details are the
Python rules' own.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

MAX_FAST_CHARS = 4096
FIELDS = ("order_id", "customer_id", "amount", "ordered_at")
_STRING = r'"[\x20\x21\x23-\x5b\x5d-\x7e]*+"'  # printable ASCII but " and \
_NUMBER = r"-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+"
_OTHER = rf'"(?!(?:{"|".join(FIELDS)})")[a-z_]{{1,32}}+": ?+(?:{_STRING}|{_NUMBER})'  # a member of another key
_MORE = rf"(?:{_OTHER}, ?+)*+"  # other members before the next field


def line_pattern(day: date) -> str:
    """The fast path's whole line: the four fields in this order, each once, other flat
    members anywhere around them; groups 1-4 the four values."""
    return (rf'^\{{{_MORE}"order_id": ?+"([\x21\x23-\x5b\x5d-\x7e]{{1,200}}+)", ?+{_MORE}'
            rf'"customer_id": ?+"(c[0-9]{{1,12}}+)", ?+{_MORE}'
            rf'"amount": ?+((?:0|[1-9][0-9]{{0,9}}+)(?:\.[0-9]{{1,2}}+)?+), ?+{_MORE}'
            rf'"ordered_at": ?+"({day.isoformat()}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{{1,6}}+)?+Z)"'
            rf"(?:, ?+{_OTHER})*+\}}\z")  # \z, not $: $ also matches before a final line terminator


def with_fast_order(lines: DataFrame, text: str, day: date, name: str = "order") -> DataFrame:
    """`lines` with a column `name`: the order (struct order_id, customer_id, amount
    decimal(12,2), ordered_at timestamp) when the line in column `text` takes the fast
    path, else null."""
    # A line of the pattern, replaced, is its four values between tabs; any other line stays
    # as it was (the pattern spans whole lines), so without a tab it is one value. Two
    # selects, so that the replace runs once per line (in one expression, Spark evaluates
    # it again for each value it takes).
    values = F.split(F.regexp_replace(text, line_pattern(day), "$1\t$2\t$3\t$4"), "\t")
    v = F.col(f"{name}_values")
    plain = (F.size(v) == 4) & (F.instr(text, "\t") == 0) & (F.length(text) <= MAX_FAST_CHARS)
    order = F.when(plain, F.struct(v[0].alias("order_id"), v[1].alias("customer_id"),
                                   v[2].cast("decimal(12,2)").alias("amount"), v[3].cast("timestamp").alias("ordered_at")))
    return lines.withColumn(f"{name}_values", values).withColumn(name, order).drop(f"{name}_values")
