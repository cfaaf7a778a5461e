"""Fixtures of the participant contract suite: `harness`, one per implementation.

Every test that takes `harness` runs once per implementation (contract_harness.
IMPLEMENTATIONS), with the id of its kind: `-k memory` runs the serverless ones alone,
without the stack or Spark. A test decorated with violated_by(kind="why") is
xfail(strict=True) for that kind only: a known violation, and a loud XPASS once fixed.

The real harnesses ask for `spark`, `pg_dsn`, `kafka_bootstrap` and `target` lazily
(request.getfixturevalue), so the memory tests need none of them.
"""

from __future__ import annotations

import psycopg2
import pytest

from contract_harness import IMPLEMENTATIONS, harness_for, implementations
from support import create_schema


def pytest_generate_tests(metafunc):
    if "harness" not in metafunc.fixturenames:
        return
    violations = getattr(metafunc.function, "violated_by", {})
    unknown = set(violations) - set(IMPLEMENTATIONS)
    if unknown:
        raise ValueError(f"{metafunc.function.__name__}: violated_by names unknown implementations {unknown}")
    metafunc.parametrize("harness", [
        pytest.param(kind, id=kind,
                     marks=[pytest.mark.xfail(strict=True, reason=violations[kind])] if kind in violations else [])
        for kind in implementations()], indirect=True)


@pytest.fixture
def harness(request):
    h = harness_for(request.param, request)
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def target(pg_dsn, unique_name):
    """A fresh target table (schema contract_tests, shaped like tests/core's) and topic name.
    The harness drops them when the test ends."""
    table = f"contract_tests.{unique_name}"
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "contract_tests")
        cur.execute(f"""create table {table} (
            customer_id text not null, day date not null, orders int not null,
            revenue numeric(12, 2), note text, load_id text not null,
            primary key (customer_id, day))""")
    return {"table": table, "topic": unique_name.replace("_", "-")}
