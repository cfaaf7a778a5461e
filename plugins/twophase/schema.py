"""One declaration of a job's output columns, which every target of that output follows.

A schema is {column: type} in order, with Spark SQL's type names (what the job's frame
shows in `df.dtypes`), so the job author reads and writes the same words:

    string, int, bigint, double, float, boolean, date, binary, decimal(p,s),
    timestamp      an instant (Spark's default timestamp; timestamptz in Postgres and Iceberg),
    timestamp_ntz  a wall-clock time without a zone (timestamp in Postgres and Iceberg).

What follows from it (twophase_airflow's LoadConfig(schema=...)):
- the job's frame must have exactly these columns with these types, checked before
  anything is staged (frame_problems): a column the job adds, drops or retypes is named
  instead of being dropped silently or failing half-way;
- a Postgres table is created from it when missing (create_table_sql), and an existing
  table that lacks one of its columns is refused, naming the statement that adds it
  (missing_columns_sql);
- an Iceberg table is created from it when missing (iceberg_types), and one that lacks a
  column is refused in the same way;
- a Kafka topic's record values hold its columns, in its order.

Depends only on the standard library and twophase.errors.
"""

from __future__ import annotations

import re

from .errors import SpecError

# Spark SQL type name -> (Postgres type, Iceberg type)
_PLAIN = {
    "string": ("text", "string"),
    "int": ("integer", "int"),
    "bigint": ("bigint", "long"),
    "double": ("double precision", "double"),
    "float": ("real", "float"),
    "boolean": ("boolean", "boolean"),
    "date": ("date", "date"),
    "binary": ("bytea", "binary"),
    "timestamp": ("timestamptz", "timestamptz"),
    "timestamp_ntz": ("timestamp", "timestamp"),
}
_ALIASES = {"long": "bigint", "integer": "int", "bool": "boolean", "text": "string"}
_DECIMAL = re.compile(r"^decimal\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)$")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
TYPES = (*_PLAIN, "decimal(p,s)")


def normal_type(type_: str, column: str = "?") -> str:
    """The type's one spelling (`long` is `bigint`, `decimal(12, 2)` is `decimal(12,2)`);
    SpecError naming the column for anything else."""
    spelled = type_.strip().lower() if isinstance(type_, str) else ""
    spelled = _ALIASES.get(spelled, spelled)
    if spelled in _PLAIN:
        return spelled
    decimal = _DECIMAL.match(spelled)
    if decimal and 1 <= int(decimal[1]) <= 38 and int(decimal[2]) <= int(decimal[1]):
        return f"decimal({int(decimal[1])},{int(decimal[2])})"
    raise SpecError(f"column {column!r} has type {type_!r}, which is not one of {', '.join(TYPES)} "
                    "(Spark SQL's names; decimal precision 1..38, scale at most the precision)")


def check(columns: dict, owner: str) -> dict[str, str]:
    """The schema {column: type} with each type in its one spelling; SpecError naming
    `owner` for a bad column name or type, a load_id column (each target adds its own) or
    an empty schema."""
    if not isinstance(columns, dict) or not columns:
        raise SpecError(f"{owner}: a schema is {{column: type}} with at least one column, got {columns!r}")
    checked = {}
    for column, type_ in columns.items():
        if not isinstance(column, str) or not _IDENT.match(column):
            raise SpecError(f"{owner}: column {column!r} is not a plain lower-case identifier")
        if column == "load_id":
            raise SpecError(f"{owner}: load_id is added by each target; leave it out of the schema")
        checked[column] = normal_type(type_, column)
    return checked


def postgres_type(type_: str) -> str:
    decimal = _DECIMAL.match(type_)
    return f"numeric({decimal[1]},{decimal[2]})" if decimal else _PLAIN[type_][0]


def iceberg_types(schema: dict[str, str]) -> dict[str, str]:
    """The schema in Iceberg's type names (an Iceberg table created from it)."""
    return {c: (f"decimal({m[1]}, {m[2]})" if (m := _DECIMAL.match(t)) else _PLAIN[t][1]) for c, t in schema.items()}


def create_table_sql(table: str, schema: dict[str, str], key: tuple = (), partition_by: str = "") -> str:
    """Idempotent SQL that makes `schema.table` with the schema's columns and `load_id`,
    and a primary key on `key` when given (its columns not null); partitioned by range on
    column `partition_by` when given (a primary key must then include it)."""
    namespace = table.split(".")[0]
    columns = [f"{c} {postgres_type(t)}{' not null' if c in key else ''}" for c, t in schema.items()]
    columns.append("load_id text not null")
    if key:
        columns.append(f"primary key ({', '.join(key)})")
    return (f"create schema if not exists {namespace};\n"
            f"create table if not exists {table} (\n    " + ",\n    ".join(columns) + "\n)"
            + (f" partition by range ({partition_by})" if partition_by else "") + ";")


def missing_columns_sql(table: str, schema: dict[str, str], present: list[str]) -> list[str]:
    """The `alter table` statements that add the schema's columns `present` lacks."""
    return [f"alter table {table} add column {c} {postgres_type(t)}" for c, t in schema.items() if c not in present]


def declared(targets) -> dict[str, dict[str, str]]:
    """{frame: schema} of the frames whose targets declare one (a target's
    `frame_schema`); SpecError when two targets of one frame declare different ones."""
    found: dict[str, tuple[str, dict]] = {}
    for target in targets:
        schema = getattr(target, "frame_schema", None)
        if not schema:
            continue
        first = found.setdefault(target.frame, (target.name, schema))
        if first[1] != schema:
            raise SpecError(f"targets {first[0]} and {target.name} load the same frame "
                            f"{target.frame or '(the main one)'!r} but declare different schemas: one frame, one "
                            "schema")
    return {frame: schema for frame, (_, schema) in found.items()}


def frame_problems(schema: dict[str, str], dtypes: list[tuple[str, str | None]], what: str) -> list[str]:
    """How a frame's columns ((name, Spark type) as `df.dtypes` gives them; a type None
    is not compared) differ from the schema: missing, extra and retyped columns, each
    named; [] when they agree."""
    have = {name: type_ for name, type_ in dtypes}
    problems = [f"{what} lacks column {c} ({t}) of the schema" for c, t in schema.items() if c not in have]
    problems += [f"{what} has column {c} ({have[c]}), which the schema does not declare: declare it, or leave "
                 "it out of the frame" for c in have if c not in schema]
    for column, type_ in schema.items():
        if have.get(column) is not None and _spark_type(have[column]) != type_:
            problems.append(f"{what} has column {column} as {have[column]}, the schema declares {type_}: "
                            f"cast it in the job (F.col({column!r}).cast({type_!r}))")
    return problems


def _spark_type(spark: str) -> str:
    """A Spark dtype in the schema's spelling; unknown ones as they are (they match nothing)."""
    try:
        return normal_type(spark)
    except SpecError:
        return spark
