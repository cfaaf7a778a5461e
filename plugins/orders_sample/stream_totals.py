"""The streaming example's output, one row per customer and load: its Postgres table and
its Iceberg columns, declared once for the DAG (dags/orders_stream_totals.py) and the
bench that stages the same rows under other names (bench/source.py)."""

from __future__ import annotations


def table_ddl(table: str) -> str:
    """The Postgres table `table` (schema.name) of the example's rows, if it is not there."""
    return f"""create table if not exists {table} (
    customer_id text not null,
    orders int not null,
    revenue numeric(14, 2) not null,
    first_order_at timestamptz not null,
    last_order_at timestamptz not null,
    load_id text not null,
    primary key (load_id, customer_id)
);
"""


ICEBERG_COLUMNS = {"customer_id": "string", "orders": "int", "revenue": "decimal(14, 2)",
                   "first_order_at": "timestamptz", "last_order_at": "timestamptz"}
