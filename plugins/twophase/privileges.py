"""Postgres grants: which ones a step needs, and a missing one named in one line.

A role that lacks a grant gets MissingPrivilege (errors.py, Terminal: retrying cannot
help) saying which grant and the GRANT statement that fixes it, e.g.

    role "loader" lacks INSERT on analytics.daily: GRANT INSERT ON analytics.daily TO loader
    (docs/clusters.md, "A locked-down Postgres")

Two ways to get there:
- require(cur, grants): a check before a step writes anything (begin, stage); every grant
  is looked up by catalog oid, so a schema without USAGE does not hide its tables.
- explain(dsn, exc): Postgres refused a statement (SQLSTATE 42501, "permission denied for
  table x"); server_errors.servers() calls it for every Postgres error. Postgres names the object
  but not the privilege: the statement's kind says which privileges it needs, and the
  server says which of those the role lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import MissingPrivilege, one_line

DOCS = '(docs/clusters.md, "A locked-down Postgres")'


@dataclass(frozen=True)
class Grant:
    """One privilege on one object: kind "table", "sequence", "schema" or "database";
    `name` is schema.name for tables and sequences, the bare name otherwise."""

    privilege: str
    kind: str
    name: str

    def describe(self) -> str:
        return f"{self.privilege} on {self.name}" if self.kind == "table" else \
            f"{self.privilege} on {self.kind} {self.name}"

    def statement(self, role: str) -> str:
        on = "" if self.kind == "table" else f"{self.kind.upper()} "
        return f"GRANT {self.privilege} ON {on}{self.name} TO {role}"


def tables(names, *privileges: str) -> list[Grant]:
    return [Grant(p, "table", n) for n in names for p in privileges]


def schemas(names, *privileges: str) -> list[Grant]:
    return [Grant(p, "schema", n) for n in names for p in privileges]


# An existing object's oid, looked up in the catalogs (no privilege needed), and whether
# the current role holds the privilege on it.
_HOLDS = {
    "table": """select has_table_privilege(c.oid, %(p)s) from pg_class c
                join pg_namespace n on n.oid = c.relnamespace where n.nspname = %(schema)s and c.relname = %(rel)s""",
    "sequence": """select has_sequence_privilege(c.oid, %(p)s) from pg_class c
                   join pg_namespace n on n.oid = c.relnamespace where n.nspname = %(schema)s and c.relname = %(rel)s""",
    "schema": "select has_schema_privilege(oid, %(p)s) from pg_namespace where nspname = %(name)s",
    "database": "select has_database_privilege(oid, %(p)s) from pg_database where datname = %(name)s",
}


def lacking(cur, grants) -> list[Grant]:
    """The grants the cursor's role lacks, of objects that exist (a missing object is
    reported by whoever needs it, with what to create)."""
    missing = []
    for grant in grants:
        schema, _, rel = grant.name.partition(".")
        cur.execute(_HOLDS[grant.kind], {"p": grant.privilege, "name": grant.name, "schema": schema, "rel": rel})
        row = cur.fetchone()
        if row is not None and not _first(row):
            missing.append(grant)
    return missing


def _first(row):
    """A row's first value, from a tuple or a dict cursor's row."""
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def require(cur, grants) -> None:
    """Raise MissingPrivilege naming every grant of `grants` the role lacks."""
    missing = lacking(cur, grants)
    if missing:
        cur.execute("select current_user")
        raise MissingPrivilege(message(_first(cur.fetchone()), missing))


def message(role: str, missing: list[Grant], otherwise: str = "") -> str:
    """`otherwise`: another way out, after the GRANT statements."""
    return one_line(f'role "{role}" lacks {", ".join(g.describe() for g in missing)}: '
                    f'{"; ".join(g.statement(role) for g in missing)}{otherwise} {DOCS}', 1000)


# -- a statement Postgres refused ------------------------------------------------------------

_DENIED = re.compile(r"permission denied for (table|sequence|schema|database|view) (\S+)")
_LOGIN_REFUSED = re.compile(r'permission denied for database "([^"]+)"')
_NOT_OWNER = re.compile(r"must be owner of (?:table|relation|sequence|schema) (\S+)")


def explain(dsn: str, exc: BaseException) -> MissingPrivilege | None:
    """exc as MissingPrivilege when Postgres refused a statement for want of a privilege,
    else None. Opens a connection of its own (exc's transaction is aborted) to ask which
    of the statement's privileges the role lacks."""
    import psycopg2
    import psycopg2.errors

    if isinstance(exc, MissingPrivilege):
        return exc
    login = _LOGIN_REFUSED.search(str(exc)) if isinstance(exc, psycopg2.OperationalError) else None
    if login:  # no connection to ask anything on
        from psycopg2.extensions import parse_dsn

        role = parse_dsn(dsn).get("user") or "<this role>"
        return MissingPrivilege(message(role, [Grant("CONNECT", "database", login.group(1))]))
    if not isinstance(exc, psycopg2.errors.InsufficientPrivilege):
        return None
    primary = (exc.diag.message_primary or str(exc)).strip()
    query = _query_of(exc)
    try:
        conn = psycopg2.connect(dsn)
    except psycopg2.Error:
        conn = None
    try:
        cur = conn.cursor() if conn is not None else None
        role = _scalar(cur, "select current_user") if cur else "<this role>"
        if primary.startswith("permission denied to finish prepared transaction"):
            return MissingPrivilege(one_line(_prepared_by_another(cur, role, query), 1000))
        owner = _NOT_OWNER.search(primary)
        if owner:
            return MissingPrivilege(one_line(
                f'role "{role}" does not own {owner.group(1)}: only its owner (or a member of the owner role, or a '
                f"superuser) may drop or alter it; run this step as the role that runs the loads {DOCS}", 1000))
        denied = _DENIED.search(primary)
        if not denied:
            return MissingPrivilege(one_line(f'role "{role}" was refused: {primary} {DOCS}', 1000))
        kind, name = denied.group(1), denied.group(2).strip('"')
        kind = "table" if kind == "view" else kind
        if kind in ("table", "sequence"):
            name = _qualified(cur, name, query)
        candidates = [Grant(p, kind, name) for p in _privileges_of(kind, query, name)]
        missing = (lacking(cur, candidates) if cur else []) or candidates[:1]
        otherwise = ", or have an admin create the schemas first (docs/sql/least-privilege.sql)" \
            if kind == "database" else ""
        return MissingPrivilege(message(role, missing, otherwise))
    finally:
        if conn is not None:
            conn.close()


def _query_of(exc) -> str:
    query = getattr(getattr(exc, "cursor", None), "query", None) or b""
    return (query.decode(errors="replace") if isinstance(query, bytes) else str(query)).strip()


def _scalar(cur, sql: str, args=None):
    cur.execute(sql, args)
    row = cur.fetchone()
    return row[0] if row else None


_CREATES_IN = re.compile(r'create\s+(?:[a-z]+\s+)*?(?:table|index|view|sequence)\s+(?:if not exists\s+)?"?(\w+)"?\.')


def _privileges_of(kind: str, query: str, name: str = "") -> list[str]:
    """The privileges a statement needs on the object `name` of `kind`, most likely first."""
    q = " ".join(query.lower().split())
    if kind == "database":
        return ["CREATE"]
    if kind == "sequence":
        return ["USAGE"]
    if kind == "schema":
        creates = _CREATES_IN.match(q)
        return ["USAGE", "CREATE"] if creates and creates.group(1) == name.lower() else ["USAGE"]
    head = q.split(" ", 1)[0] if q else ""
    if head == "insert":
        return ["INSERT", "SELECT", "UPDATE"] if " on conflict " in q else ["INSERT", "SELECT"]
    if head == "copy":
        return ["INSERT"] if " from " in q else ["SELECT"]
    if head in ("update", "delete"):
        return [head.upper(), "SELECT"]
    if head == "select":
        return ["UPDATE", "SELECT"] if " for update" in q else ["SELECT"]
    return ["SELECT", "INSERT", "UPDATE", "DELETE"]


def _qualified(cur, relation: str, query: str) -> str:
    """schema.relation for the unqualified name Postgres' message gives: as the statement
    spells it, else the catalog's only table of that name, else the name as given."""
    found = re.search(rf'"?(\w+)"?\s*\.\s*"?{re.escape(relation)}"?\b', query)
    if found:
        return f"{found.group(1)}.{relation}"
    if cur is not None:
        cur.execute("select n.nspname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                    "where c.relname = %s", (relation,))
        rows = cur.fetchall()
        if len(rows) == 1:
            return f"{rows[0][0]}.{relation}"
    return relation


def _prepared_by_another(cur, role: str, query: str) -> str:
    gid = re.search(r"prepared\s+'([^']*)'", query)
    owner = None
    if gid and cur is not None:
        owner = _scalar(cur, "select owner from pg_prepared_xacts where gid = %s", (gid.group(1),))
    which = f"prepared transaction {gid.group(1)}" if gid else "a prepared transaction"
    by = f'role "{owner}"' if owner else "another role"
    return (f'role "{role}" cannot finish {which}: {by} prepared it, and Postgres lets only the role that '
            f"prepared a transaction (or a superuser) commit or roll it back; run recovery as "
            f"{by if owner else 'that role'} or a superuser {DOCS}")
