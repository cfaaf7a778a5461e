"""Publish by ATTACH PARTITION (PostgresTarget publish="attach", docs/adr/0013): the
staging table is shaped like the partition of the load's interval, and the prepared
transaction (or the last resource's) makes it that partition, whatever its row count.

- At stage: the table must be partitioned by range on one date, timestamp or timestamptz
  column, owned by the load's role (ALTER TABLE needs it), which may CREATE in its schema
  (the staging table moves there), and the interval must be whole
  values of that column; the staging table is logged (it becomes the table's data) and
  carries a CHECK of the partition's bounds, so a row outside the interval fails its
  COPY, and ATTACH proves the bounds from it instead of scanning the rows.
- At publish, in the transaction: mode replace detaches and drops the partition of exactly
  the interval (detach takes ACCESS EXCLUSIVE on the table until commit: readers wait for
  the load's prepared window); then the staging table gets its load_id (a column added
  with a default: no row is rewritten), moves to the table's schema as
  <table>_p<interval start> and is attached (SHARE UPDATE EXCLUSIVE on the table: readers
  and writers go on). The table's indexes and unique constraints are built on the staged
  rows at prepare (index_staging), so ATTACH finds them instead of building them in the
  vote; staged rows that break one make the vote no.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

import psycopg2.errors
from psycopg2 import sql

from ...errors import one_line
from .server import PART_COLUMN, PostgresConfigError

KEY_TYPES = ("date", "timestamp without time zone", "timestamp with time zone")
CHECK_NAME = "twophase_in_load_interval"
_RANGE = r"^FOR VALUES FROM \('([^']*)'\) TO \('([^']*)'\)$"  # a range partition's bounds (pg_get_expr)


def key_of(cur, target) -> tuple[str, str]:
    """(column, type) the table is partitioned by; PostgresConfigError unless by range on
    one column of KEY_TYPES, owned by (a role of) the load's role, which may CREATE in its
    schema."""
    cur.execute("""select p.partstrat, p.partnatts, a.attname, format_type(a.atttypid, a.atttypmod),
                          pg_has_role(current_user, c.relowner, 'USAGE'),
                          has_schema_privilege(current_user, c.relnamespace, 'CREATE')
                   from pg_class c left join pg_partitioned_table p on p.partrelid = c.oid
                   left join pg_attribute a on a.attrelid = c.oid and a.attnum = p.partattrs[0]
                   where c.oid = to_regclass(%s)""", (target.table,))
    row = cur.fetchone()
    if row is None or row[0] is None:
        raise PostgresConfigError(f"table {target.table} is not partitioned, so publish 'attach' cannot make the "
                                  "load a partition of it: partition it by range on its date or time column, or "
                                  "publish 'insert'")
    strategy, columns, column, kind, owner, create = row
    if strategy != "r" or columns != 1 or column is None or kind not in KEY_TYPES:
        raise PostgresConfigError(f"table {target.table} must be partitioned by range on one column of type "
                                  f"{', '.join(KEY_TYPES)} for publish 'attach'")
    if not owner:
        raise PostgresConfigError(f"publish 'attach' alters table {target.table} (ATTACH PARTITION), which only its "
                                  "owner may: make the load's role own it, or a member of its owner")
    if not create:
        raise PostgresConfigError(f"publish 'attach' moves the load's staging table into schema {target.schema} as "
                                  f"the partition of {target.table}, which needs CREATE on that schema: grant it "
                                  "to the load's role")
    return column, kind


def bounds(target, kind: str) -> tuple[str, str]:
    """The partition's bounds, literals of the key's type: the load's interval, which must
    be whole values of it (a date key takes intervals from midnight UTC to midnight UTC)."""
    start, end = (datetime.fromisoformat(x).astimezone(timezone.utc) for x in target.interval)
    if kind == "date":
        if any(t.time() != datetime.min.time() for t in (start, end)) or start.date() == end.date():
            raise PostgresConfigError(f"table {target.table} is partitioned by a date, but the load's interval "
                                      f"{start.isoformat()} to {end.isoformat()} is not whole days (UTC)")
        return start.date().isoformat(), end.date().isoformat()
    if kind == "timestamp with time zone":
        return start.isoformat(), end.isoformat()
    return start.replace(tzinfo=None).isoformat(" "), end.replace(tzinfo=None).isoformat(" ")


def partition_name(target, low: str) -> str:
    """<table>_p<interval start, digits>: 20261120 for a day, 20261120t060000 for an hour."""
    suffix = "p" + re.sub(r"[^0-9t]", "", low.lower().replace(" ", "t"))[:15]
    return f"{target.relation[:62 - len(suffix)]}_{suffix}"


def check(cur, target) -> tuple[str, str, str, str]:
    """(key column, its type, low bound, high bound) of the load's partition, before
    anything is written: PostgresConfigError for a table or interval attach cannot
    publish, and for an append whose partition exists already."""
    column, kind = key_of(cur, target)
    low, high = bounds(target, kind)
    taken = [name for name, exact in _overlapping(cur, target, kind, low, high) if exact]
    if taken and target.mode != "replace":
        raise PostgresConfigError(f"table {target.table} has a partition of the load's interval already ({taken[0]}): "
                                  "an append load adds a new one; replace it with mode 'replace'")
    return column, kind, low, high


def shape_staging(cur, staging: str, checked: tuple[str, str, str, str]) -> None:
    """The staging table as the partition needs it: logged (created so by the caller),
    with the CHECK of the interval's bounds (`checked`: what check() returned)."""
    column, kind, low, high = checked
    key = sql.Identifier(column)
    cur.execute(sql.SQL("alter table {} add constraint {} check ({} is not null and {} >= %s::{} and {} < %s::{})")
                .format(sql.SQL(staging), sql.Identifier(CHECK_NAME), key, key, sql.SQL(kind), key, sql.SQL(kind)),
                (low, high))


def index_staging(cur, target, staging: str) -> str:
    """Build the table's indexes and unique constraints on the staged rows (at prepare,
    holding nothing on the table), so that ATTACH finds them and builds nothing in the
    vote. '' when done (or done before), else why the staged rows break one of them."""
    cur.execute("select exists (select from pg_index where indrelid = to_regclass(%s))", (staging,))
    if cur.fetchone()[0]:
        return ""
    cur.execute("""select pg_get_constraintdef(c.oid), pg_get_indexdef(i.indexrelid),
                          format('%%I.%%I', n.nspname, t.relname)
                   from pg_index i join pg_class t on t.oid = i.indrelid join pg_namespace n on n.oid = t.relnamespace
                   left join pg_constraint c on c.conindid = i.indexrelid and c.conrelid = i.indrelid
                   where i.indrelid = to_regclass(%s) order by i.indexrelid""", (target.table,))
    for constraint, index, table in cur.fetchall():
        if constraint is not None:  # ATTACH takes a child's index for a constraint only with its constraint
            statement = f"alter table {staging} add {constraint}"
        else:  # CREATE [UNIQUE] INDEX <name> ON ONLY <table> USING ...: unnamed, on staging
            found = re.match(rf"^(CREATE (?:UNIQUE )?INDEX) .+? ON (?:ONLY )?{re.escape(table)} (USING .*)$", index)
            statement = f"{found[1]} on {staging} {found[2]}"
        try:
            cur.execute(statement)
        except (psycopg2.errors.UniqueViolation, psycopg2.errors.ExclusionViolation) as exc:
            return f"the staged rows for {target.table} break its {constraint or index}: {one_line(str(exc))}"
    return ""


def publish(cur, target, staging: str, load_id: str) -> tuple[int, int]:
    """In the caller's transaction: the staging table becomes the interval's partition
    (mode replace: after the one there is detached and dropped); (rows published, rows
    replaced)."""
    column, kind = key_of(cur, target)
    low, high = bounds(target, kind)
    deleted = 0
    for name, exact in _overlapping(cur, target, kind, low, high):
        if not exact or target.mode != "replace":
            raise PostgresConfigError(f"partition {name} of {target.table} overlaps the load's interval "
                                      f"[{low}, {high}){'' if exact else ' without matching it'}: nothing was "
                                      "published")
        cur.execute(sql.SQL("select count(*) from {}").format(sql.SQL(name)))
        deleted += cur.fetchone()[0]
        cur.execute(sql.SQL("alter table {} detach partition {}").format(_table(target), sql.SQL(name)))
        cur.execute(sql.SQL("drop table {}").format(sql.SQL(name)))
    cur.execute(sql.SQL("alter table {} drop column {}, add column load_id text not null default %s").format(
        sql.SQL(staging), sql.Identifier(PART_COLUMN)), (load_id,))
    cur.execute(sql.SQL("alter table {} alter column load_id drop default").format(sql.SQL(staging)))
    cur.execute(sql.SQL("select count(*) from {}").format(sql.SQL(staging)))
    rows = cur.fetchone()[0]
    name = partition_name(target, low)
    cur.execute(sql.SQL("alter table {} set schema {}").format(sql.SQL(staging), sql.Identifier(target.schema)))
    cur.execute(sql.SQL("alter table {} rename to {}").format(
        sql.Identifier(target.schema, staging.split(".", 1)[1]), sql.Identifier(name)))
    cur.execute(sql.SQL("alter table {} attach partition {} for values from (%s) to (%s)").format(
        _table(target), sql.Identifier(target.schema, name)), (low, high))
    return rows, deleted


def _table(target) -> sql.Composable:
    return sql.Identifier(target.schema, target.relation)


def _overlapping(cur, target, kind: str, low: str, high: str) -> list[tuple[str, bool]]:
    """(partition, whether its bounds are exactly [low, high)) of every range partition of
    the table that overlaps [low, high), in one query however many partitions it has; a
    DEFAULT partition is left to ATTACH, which checks it holds no row of the interval."""
    cur.execute(sql.SQL("""select name, lo::{t} = %(low)s::{t} and hi::{t} = %(high)s::{t}
                           from (select c.oid::regclass::text as name, b[1] as lo, b[2] as hi
                                 from pg_inherits i join pg_class c on c.oid = i.inhrelid,
                                      regexp_match(pg_get_expr(c.relpartbound, c.oid), %(range)s) as b
                                 where i.inhparent = to_regclass(%(table)s) and b is not null) p
                           where lo::{t} < %(high)s::{t} and %(low)s::{t} < hi::{t}""").format(t=sql.SQL(kind)),
                {"low": low, "high": high, "range": _RANGE, "table": target.table})
    return [(name, exact) for name, exact in cur.fetchall()]
