"""A role with only the documented grants runs a load; without one, the error names it.

Each run makes its own database and roles with the stack's admin connection
(TWOPHASE_PG_ADMIN_DSN, scripts/stack env), sets it up as docs/clusters.md says ("A
locked-down Postgres": `python -m twophase migrate` and docs/sql/least-privilege.sql as the
admin, the target tables' grants), and drops them at the end. Loads run through the core
with the in-process staging pass (LocalStage: the real PostgresWriter, no Spark).
"""

from __future__ import annotations

import re
import secrets
import subprocess
import uuid
from datetime import date, timedelta
from pathlib import Path

import psycopg2
import pytest
from psycopg2.extensions import make_dsn

from twophase.connections import Connections
from twophase.errors import MissingPrivilege
from twophase.ids import load_id_for
from twophase.log import WRITER_GRANTS, PostgresLog
from twophase.ops import recovery
from twophase.participants.memory import LocalFrame, LocalStage
from twophase.participants.postgres import PostgresTarget
from twophase.participants.postgres.server import PostgresConfigError, grants_needed
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spec import LoadSpec

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "sql" / "least-privilege.sql"
DAY = "2026-11-20"
TARGETS = (PostgresTarget("lp.daily"), PostgresTarget("lp.latest", "replace", {"day": DAY}))
TABLE_GRANTS = ["grant usage on schema lp to {role}", "grant select, insert on lp.daily, lp.latest to {role}",
                "grant delete on lp.latest to {role}"]
# Every grant the docs list for a role that runs loads, from the code that checks them.
DOCUMENTED = list(dict.fromkeys([*WRITER_GRANTS, *grants_needed(TARGETS)]))
ROWS = [{"customer_id": f"c{i:04d}", "day": date(2026, 11, 20), "orders": i % 7 + 1} for i in range(30)]


def _admin(dsn: str, *statements: str, fetch: bool = False):
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return cur.fetchall() if fetch else None
    finally:
        conn.close()


class Locked:
    """A fresh database whose schemas an admin made, and a role with the documented grants."""

    def __init__(self, admin_dsn: str, pg_dsn: str, admin_made_schemas: bool = True):
        """`admin_made_schemas`: set-up (a) of the docs; else (b), CREATE on the database."""
        suffix = uuid.uuid4().hex[:8]
        self.db, self.role = f"twophase_lp_{suffix}", f"twophase_lp_{suffix}"
        self.server_admin = admin_dsn
        self.admin = make_dsn(admin_dsn, dbname=self.db)
        self._pg_dsn, self._admin_made_schemas = pg_dsn, admin_made_schemas
        self.roles: list[str] = []
        _admin(admin_dsn, f"create database {self.db}")
        self.dsn = self.add_role(self.role)

    def add_role(self, role: str) -> str:
        """A login role with the documented grants in this database; its DSN."""
        password = secrets.token_hex(16)
        _admin(self.server_admin, f"create role {role} login password '{password}'")
        self.roles.append(role)
        self.set_up(role)
        return make_dsn(self._pg_dsn, user=role, password=password, dbname=self.db)

    def set_up(self, role: str) -> None:
        """What the docs tell an admin to run: (a) migrate, the SQL script, (b) CREATE on the
        database; and the targets' grants."""
        if self._admin_made_schemas:
            PostgresLog(self.admin).ensure_schema()
            subprocess.run(["psql", "-X", "-q", "-d", self.admin, "-v", f"role={role}", "-f", str(SCRIPT)],
                           check=True, capture_output=True, text=True)
        else:
            _admin(self.admin, f"grant connect, create on database {self.db} to {role}")
        _admin(self.admin, "create schema if not exists lp",
               "create table if not exists lp.daily (customer_id text, day date, orders int, load_id text not null)",
               "create table if not exists lp.latest (customer_id text, day date, orders int, load_id text not null)",
               *(g.format(role=role) for g in TABLE_GRANTS))

    def drop(self) -> None:
        for (gid,) in _admin(self.admin, "select gid from pg_prepared_xacts where database = current_database()",
                             fetch=True):
            _admin(self.admin, f"rollback prepared '{gid}'")
        _admin(self.server_admin, f"drop database if exists {self.db} with (force)",
               *(f"drop role if exists {r}" for r in self.roles))

    # -- what the admin sees ---------------------------------------------------------------
    def state(self, load_id: str) -> str | None:
        rows = _admin(self.admin, f"select state from twophase.loads where load_id = '{load_id}'", fetch=True)
        return rows[0][0] if rows else None

    def rows(self, load_id: str) -> dict[str, int]:
        return {t.table: _admin(self.admin, f"select count(*) from {t.table} where load_id = '{load_id}'",
                                fetch=True)[0][0] for t in TARGETS}

    def leftovers(self) -> tuple[int, int]:
        """(prepared transactions, staging tables) in the database."""
        return tuple(_admin(self.admin, sql, fetch=True)[0][0] for sql in (
            "select count(*) from pg_prepared_xacts where database = current_database()",
            "select count(*) from pg_tables where schemaname = 'twophase_staging'"))


@pytest.fixture(scope="module")
def locked(pg_dsn, admin_dsn):
    db = Locked(admin_dsn, pg_dsn)
    try:
        yield db
    finally:
        db.drop()


def _spec(name: str) -> LoadSpec:
    run_id = f"{name}-{uuid.uuid4().hex[:6]}"
    return LoadSpec(load_id=load_id_for("least_privilege", run_id), pipeline="least_privilege", run_id=run_id,
                    targets=TARGETS)


def _load(dsn: str, spec: LoadSpec, stage=None) -> State:
    """begin, prepare, vote, commit or rollback, as the DAG runs them, as the role of `dsn`."""
    log, conns = PostgresLog(dsn), Connections(dsn, "")
    coordinator.begin(log, spec)
    try:
        coordinator.prepare(log, conns, spec.load_id, LocalFrame.of_rows(ROWS), stage=stage or LocalStage())
    except MissingPrivilege:
        pass  # the prepare task fails; the vote decides ABORT
    decided = coordinator.vote(log, conns, spec.load_id)
    if decided.state == State.COMMITTING:
        coordinator.commit(log, conns, spec.load_id)
    else:
        coordinator.rollback(log, conns, spec.load_id)
    return log.get(spec.load_id).state


def test_a_role_with_the_documented_grants_commits_a_load(locked):
    spec = _spec("commit")
    assert _load(locked.dsn, spec) == State.COMMITTED
    assert locked.rows(spec.load_id) == {"lp.daily": len(ROWS), "lp.latest": len(ROWS)}
    assert locked.leftovers() == (0, 0)


def _revoke(locked, grant, role=None) -> str:
    role = role or locked.role
    on = "" if grant.kind == "table" else f"{grant.kind} "
    return f"revoke {grant.privilege} on {on}{grant.name} from {role}"


@pytest.mark.parametrize("grant", DOCUMENTED, ids=lambda g: g.describe().replace(" ", "_"))
def test_without_one_grant_the_error_names_it_and_nothing_is_left(locked, grant):
    spec = _spec("revoked")
    log, conns = PostgresLog(locked.dsn), Connections(locked.dsn, "")
    named = f'lacks {grant.describe()}: {grant.statement(locked.role)} (docs/clusters.md, "A locked-down Postgres")'
    _admin(locked.admin, _revoke(locked, grant))
    try:
        try:
            coordinator.begin(log, spec)
        except MissingPrivilege as exc:  # the log's grants: checked before the load is logged
            assert named in str(exc), str(exc)
            assert locked.state(spec.load_id) is None
        else:  # the target database's grants: checked before anything is staged
            with pytest.raises(MissingPrivilege) as failed:
                coordinator.prepare(log, conns, spec.load_id, LocalFrame.of_rows(ROWS), stage=LocalStage())
            assert named in str(failed.value), str(failed.value)
            decided = coordinator.vote(log, conns, spec.load_id)
            assert decided.state == State.ABORTING and named in decided.prepare_error and named in decided.reason
            try:
                coordinator.rollback(log, conns, spec.load_id)
            except MissingPrivilege as exc:  # the rollback needs the grant too: it waits for it
                assert named in str(exc), str(exc)
    finally:
        _admin(locked.admin, _revoke(locked, grant).replace("revoke", "grant", 1).replace(" from ", " to "))
    recovery.recover(log, conns, timedelta(0))
    assert locked.state(spec.load_id) in (None, "ABORTED")
    assert locked.rows(spec.load_id) == {"lp.daily": 0, "lp.latest": 0}
    assert locked.leftovers() == (0, 0)


def test_a_login_without_connect_names_the_grant(locked):
    """Not retried as "server unreachable": the grant is named, nothing is logged."""
    spec = _spec("connect")
    _admin(locked.admin, f"revoke connect on database {locked.db} from public, {locked.role}")
    try:
        with pytest.raises(MissingPrivilege, match=re.escape(
                f'role "{locked.role}" lacks CONNECT on database {locked.db}: '
                f"GRANT CONNECT ON DATABASE {locked.db} TO {locked.role} (docs/clusters.md")):
            coordinator.begin(PostgresLog(locked.dsn), spec)
    finally:
        _admin(locked.admin, f"grant connect on database {locked.db} to public, {locked.role}")
    assert locked.state(spec.load_id) is None


def test_a_grant_revoked_while_the_load_waits_is_named_by_the_vote(locked):
    """The promote's INSERT (the vote's ready) refused by Postgres, not by the check
    before staging: the vote aborts naming the grant."""
    spec = _spec("promote")

    def stage_then_revoke(frames, stagings):
        staged = LocalStage()(frames, stagings)
        _admin(locked.admin, f"revoke insert on lp.latest from {locked.role}")
        return staged

    try:
        assert _load(locked.dsn, spec, stage_then_revoke) == State.ABORTED
    finally:
        _admin(locked.admin, f"grant insert on lp.latest to {locked.role}")
    load = PostgresLog(locked.dsn).get(spec.load_id)
    named = f"lacks INSERT on lp.latest: GRANT INSERT ON lp.latest TO {locked.role} (docs/clusters.md"
    assert load.prepare_error is None and "postgres could not be made ready" in load.reason, load.reason
    assert named in load.reason, load.reason
    assert locked.rows(spec.load_id) == {"lp.daily": 0, "lp.latest": 0}
    assert locked.leftovers() == (0, 0)


def test_only_the_role_that_prepared_can_finish_it(locked):
    """Recovery run by another role (same grants) cannot roll back the prepared
    transaction and says whose it is; run as the loading role, it finishes."""
    spec = _spec("other-role")
    log, conns = PostgresLog(locked.dsn), Connections(locked.dsn, "")
    coordinator.begin(log, spec)
    coordinator.prepare(log, conns, spec.load_id, LocalFrame.of_rows(ROWS), stage=LocalStage())
    [postgres] = conns.participants(log.get(spec.load_id).spec())
    log.record_vote(spec.load_id, postgres.ready(log.votes(spec.load_id)["postgres"]))  # the vote's ready, then a crash
    other = locked.add_role(f"{locked.role}_ops")
    actions = recovery.recover(PostgresLog(other), Connections(other, ""), timedelta(0))
    [failed] = [a for a in actions if a.load_id == spec.load_id]
    assert failed.action == "failed"
    assert (f'role "{locked.role}_ops" cannot finish prepared transaction twophase:{spec.load_id}: '
            f'role "{locked.role}" prepared it') in failed.detail, failed.detail
    assert locked.leftovers()[0] == 1
    recovery.recover(log, conns, timedelta(0))
    assert locked.state(spec.load_id) == "ABORTED"
    assert locked.rows(spec.load_id) == {"lp.daily": 0, "lp.latest": 0}
    assert locked.leftovers() == (0, 0)


def test_a_log_behind_the_release_names_its_owner_migration(locked):
    """The log's migrations need its tables' owner: a loading role says so, and runs none."""
    from twophase.log import MIGRATIONS

    latest = len(MIGRATIONS)
    _admin(locked.admin, f"delete from twophase.schema_version where version = {latest}")
    try:
        with pytest.raises(MissingPrivilege, match=(
                f"schema twophase is at version {latest - 1} and this release needs {latest}; only the owner of its "
                "tables can upgrade it .*: run `python -m twophase migrate` as that role")):
            PostgresLog(locked.dsn).ensure_schema()
    finally:
        _admin(locked.admin, f"insert into twophase.schema_version values ({latest})")


def test_a_role_with_create_on_the_database_makes_the_schemas_itself(pg_dsn, admin_dsn):
    """Set-up (b): nothing made beforehand but the target tables."""
    db = Locked(admin_dsn, pg_dsn, admin_made_schemas=False)
    try:
        spec = _spec("create")
        assert _load(db.dsn, spec) == State.COMMITTED
        assert db.rows(spec.load_id) == {"lp.daily": len(ROWS), "lp.latest": len(ROWS)}
        owners = _admin(db.admin, "select nspname, pg_get_userbyid(nspowner) from pg_namespace "
                        "where nspname like 'twophase%' order by 1", fetch=True)
        assert owners == [("twophase", db.role), ("twophase_staging", db.role)]
        assert db.leftovers() == (0, 0)
    finally:
        db.drop()


def test_publish_attach_needs_the_table_owned_and_create_on_its_schema(locked):
    """docs/clusters.md: a target with publish="attach" needs more than the grants above;
    without each, the prepare is refused at stage naming what is missing, the load rolls
    back, and nothing is left."""
    _admin(locked.admin, "create table lp.parts (customer_id text, day date not null, orders int, "
                         "load_id text not null) partition by range (day)",
           f"grant select, insert on lp.parts to {locked.role}")
    log, conns = PostgresLog(locked.dsn), Connections(locked.dsn, "")

    def load(name: str, refused: str = "") -> State:
        spec = LoadSpec(load_id=load_id_for("least_privilege", f"{name}-{uuid.uuid4().hex[:6]}"),
                        pipeline="least_privilege", run_id=name,
                        targets=(PostgresTarget("lp.parts", publish="attach"),),
                        data_interval=(f"{DAY}T00:00:00+00:00", "2026-11-21T00:00:00+00:00"))
        coordinator.begin(log, spec)
        if refused:
            with pytest.raises(PostgresConfigError, match=refused):
                coordinator.prepare(log, conns, spec.load_id, LocalFrame.of_rows(ROWS), stage=LocalStage())
            assert coordinator.vote(log, conns, spec.load_id).state == State.ABORTING
            coordinator.rollback(log, conns, spec.load_id)
            return log.get(spec.load_id).state
        assert _load(locked.dsn, spec) == State.COMMITTED
        return _admin(locked.admin, f"select count(*) from lp.parts where load_id = '{spec.load_id}'", fetch=True)[0][0]

    assert load("not-owner", "which only its owner may") == State.ABORTED
    _admin(locked.admin, f"alter table lp.parts owner to {locked.role}",
           f"revoke create on schema lp from {locked.role}")
    assert load("no-create", "needs CREATE on that schema") == State.ABORTED
    assert locked.leftovers() == (0, 0)
    _admin(locked.admin, f"grant create on schema lp to {locked.role}")
    assert load("granted") == len(ROWS)
    assert locked.leftovers() == (0, 0)
