"""Naming a missing Postgres grant (twophase.privileges), and the admin's SQL script
granting every grant the code checks. No server: the grants themselves are exercised
against the stack by tests/core/test_least_privilege.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from twophase.log import WRITER_GRANTS
from twophase.participants.postgres import PostgresTarget
from twophase.participants.postgres.server import grants_needed
from twophase.privileges import Grant, _privileges_of, message

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "sql" / "least-privilege.sql"


def test_the_message_names_the_grant_and_the_statement_that_fixes_it():
    assert message("twophase_app", [Grant("INSERT", "table", "analytics.customer_daily_totals")]) == (
        'role "twophase_app" lacks INSERT on analytics.customer_daily_totals: GRANT INSERT ON '
        'analytics.customer_daily_totals TO twophase_app (docs/clusters.md, "A locked-down Postgres")')
    assert message("r", [Grant("USAGE", "schema", "s"), Grant("USAGE", "sequence", "s.q")]) == (
        'role "r" lacks USAGE on schema s, USAGE on sequence s.q: GRANT USAGE ON SCHEMA s TO r; '
        'GRANT USAGE ON SEQUENCE s.q TO r (docs/clusters.md, "A locked-down Postgres")')


@pytest.mark.parametrize("kind, name, statement, privileges", [
    ("table", "lp.t", 'insert into "lp"."t" ("a", load_id) select "a", $1 from twophase_staging.stg',
     ["INSERT", "SELECT"]),
    ("table", "twophase.votes", "insert into twophase.votes values (1) on conflict (load_id) do update set yes = true",
     ["INSERT", "SELECT", "UPDATE"]),
    ("table", "twophase.loads", "select state from twophase.loads where load_id = 'x' for update",
     ["UPDATE", "SELECT"]),
    ("table", "lp.t", "select count(*) from lp.t", ["SELECT"]),
    ("table", "lp.t", 'delete from "lp"."t" where "day" = 1', ["DELETE", "SELECT"]),
    ("table", "twophase_staging.stg", "copy twophase_staging.stg (a) from stdin with (format csv)", ["INSERT"]),
    ("schema", "twophase_staging", "create unlogged table twophase_staging.stg (like lp.t)", ["USAGE", "CREATE"]),
    ("schema", "lp", "create unlogged table twophase_staging.stg (like lp.t)", ["USAGE"]),
    ("schema", "twophase", "select 1 from twophase.schema_version", ["USAGE"]),
    ("database", "twophase", "create schema if not exists twophase_staging", ["CREATE"]),
    ("sequence", "twophase.transitions_id_seq", "insert into twophase.transitions (load_id) values ('x')", ["USAGE"]),
])
def test_a_statement_kind_says_which_privileges_it_needs(kind, name, statement, privileges):
    assert _privileges_of(kind, statement, name) == privileges


def _targets_schema_free(grants):
    """The grants on the objects the script makes (not on the user's target tables)."""
    return [g for g in grants if g.name.split(".")[0] in ("twophase", "twophase_staging")]


@pytest.mark.parametrize("grant", _targets_schema_free(
    [*WRITER_GRANTS, *grants_needed([PostgresTarget("lp.t", "replace", {"day": "x"})])]), ids=Grant.describe)
def test_the_admin_script_grants_what_the_code_checks(grant):
    script = SCRIPT.read_text().lower()
    on = "" if grant.kind == "table" else rf"{grant.kind} "
    pattern = rf"grant [a-z, ]*\b{grant.privilege.lower()}\b[a-z, ]* on {on}[a-z_., ]*\b{re.escape(grant.name)}\b"
    assert re.search(pattern, script), f"docs/sql/least-privilege.sql does not grant {grant.describe()}"
