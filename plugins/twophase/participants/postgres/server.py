"""The Postgres server's side of the participant: connections, prepared transactions,
staging tables and the commit markers table (driver side and recovery)."""

from __future__ import annotations

from contextlib import contextmanager

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from ... import ids, privileges
from ...server_errors import servers

PART_COLUMN = "_twophase_part"
MARKERS = "twophase.pg_commit_markers"
DECISIONS = "twophase.decisions"  # a last resource's markers: its COMMIT, or an ABORT claimed first


class PostgresConfigError(RuntimeError):
    """The server or the target table cannot take part; nothing was written."""


def grants_needed(tables, last_resource: bool = False) -> list[privileges.Grant]:
    """What the role that runs loads needs in a target database, besides the schemas an
    admin may create (ensure_schemas): docs/clusters.md, "A locked-down Postgres"."""
    replaced = [t.table for t in tables if t.mode == "replace"]
    return [*privileges.schemas(["twophase"], "USAGE"),
            *(privileges.tables([DECISIONS], "SELECT", "INSERT", "UPDATE") if last_resource else
              privileges.tables([MARKERS], "SELECT", "INSERT")),
            *privileges.schemas([ids.STAGING_SCHEMA], "USAGE", "CREATE"),
            *privileges.schemas(sorted({t.schema for t in tables}), "USAGE"),
            *privileges.tables([t.table for t in tables], "SELECT", "INSERT"),
            *privileges.tables(replaced, "DELETE")]


def ensure_schemas(cur, last_resource: bool = False) -> None:
    """Create the commit markers table (a last resource's: the decisions table) and the
    staging schema, and their schema, when missing: only then is CREATE on the database
    (or schema) needed."""
    cur.execute("select to_regnamespace('twophase') is not null, to_regnamespace(%s) is not null",
                (ids.STAGING_SCHEMA,))
    twophase, staging = cur.fetchone()
    if last_resource:
        ensure_decisions(cur)
    markers = last_resource or (twophase and _exists(cur, MARKERS))
    if twophase and staging and markers:
        return
    with creating(cur):
        if not twophase:
            cur.execute("create schema if not exists twophase")
        if not markers:
            cur.execute(f"""create table if not exists {MARKERS} (
                gid text primary key, load_id text not null, rows bigint not null,
                deleted bigint not null, prepared_at timestamptz not null default now())""")
        if not staging:
            cur.execute(f"create schema if not exists {ids.STAGING_SCHEMA}")


def ensure_decisions(cur) -> None:
    """The decisions table (a last resource's markers), and its schema, when missing."""
    if not _exists(cur, DECISIONS):
        with creating(cur):
            cur.execute("create schema if not exists twophase")
            cur.execute(f"""create table if not exists {DECISIONS} (
                load_id text primary key, decision text not null check (decision in ('COMMIT', 'ABORT')),
                tables jsonb, decided_at timestamptz not null default now())""")


@contextmanager
def creating(cur):
    """What is inside runs in one session at a time on the server (ids.CREATING_LOCK, as
    the transaction log's migrations): held to the end of the transaction, or, in
    autocommit, of the block."""
    if not cur.connection.autocommit:
        cur.execute("select pg_advisory_xact_lock(hashtext(%s))", (ids.CREATING_LOCK,))
        yield
        return
    cur.execute("select pg_advisory_lock(hashtext(%s))", (ids.CREATING_LOCK,))
    try:
        yield
    finally:
        cur.execute("select pg_advisory_unlock(hashtext(%s))", (ids.CREATING_LOCK,))


def _exists(cur, table: str) -> bool:
    """The table exists (whatever this role may do with it)."""
    schema, name = table.split(".")
    cur.execute("""select 1 from pg_class c join pg_namespace n on n.oid = c.relnamespace
                   where n.nspname = %s and c.relname = %s""", (schema, name))
    return cur.fetchone() is not None



def _connect(dsn: str, autocommit: bool = True):
    """A connection; autocommit unless asked. Use with closing(): since psycopg2 2.9,
    `with conn:` opens a transaction even in autocommit, and COMMIT PREPARED refuses that.
    A server that does not answer raises PostgresUnreachable (server_errors.servers)."""
    with servers(pg_dsn=dsn):
        conn = psycopg2.connect(dsn)
    conn.autocommit = autocommit
    return conn


@contextmanager
def _autocommit(dsn: str):
    """A cursor of an autocommit connection; a server lost meanwhile raises PostgresUnreachable."""
    conn = _connect(dsn)
    try:
        with servers(pg_dsn=dsn), conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def _is_prepared(cur, gid: str) -> bool:
    """True if gid is a prepared transaction of the cursor's database (COMMIT/ROLLBACK
    PREPARED only work from that database)."""
    cur.execute("select 1 from pg_prepared_xacts where gid = %s and database = current_database()", (gid,))
    return cur.fetchone() is not None


def is_prepared(dsn: str, gid: str) -> bool:
    with _autocommit(dsn) as cur:
        return _is_prepared(cur, gid)


def prepared_gids(dsn: str) -> list[str]:
    """Every prepared transaction of this protocol in the current database."""
    with _autocommit(dsn) as cur:
        cur.execute("select gid from pg_prepared_xacts where gid like %s and database = current_database()",
                    (ids.GID_PREFIX + "%",))
        return [r[0] for r in cur.fetchall()]


def staging_tables(dsn: str) -> dict[str, str]:
    """{staging table: load id} for every staging table left in the staging schema."""
    with _autocommit(dsn) as cur:
        cur.execute("""select c.relname, obj_description(c.oid, 'pg_class') from pg_class c
                       join pg_namespace n on n.oid = c.relnamespace
                       where n.nspname = %s and c.relkind = 'r'""", (ids.STAGING_SCHEMA,))
        return {name: load_id for name, load_id in cur.fetchall()}


def _rollback_gid(cur, gid: str) -> bool:
    """ROLLBACK PREPARED gid; False if it is not prepared in this database (never was, or
    resolved already, possibly by a concurrent actor)."""
    if not _is_prepared(cur, gid):
        return False
    try:
        cur.execute("rollback prepared %s", (gid,))
        return True
    except psycopg2.errors.UndefinedObject:
        return False


def rollback_gid(dsn: str, gid: str) -> bool:
    """ROLLBACK PREPARED an orphaned gid; False if it was already gone."""
    with _autocommit(dsn) as cur:
        return _rollback_gid(cur, gid)


def drop_staging_table(dsn: str, name: str) -> None:
    with _autocommit(dsn) as cur:
        # A prepared transaction that read the table holds a lock on it until resolved:
        # fail with a clear error rather than wait for it forever.
        cur.execute("set lock_timeout = '10s'")
        cur.execute(sql.SQL("drop table if exists {}").format(sql.Identifier(ids.STAGING_SCHEMA, name)))

