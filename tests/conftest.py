"""Shared fixtures: the real servers of the local stack (see scripts/stack).

Tests run through `scripts/test`, which brings the stack up and exports its environment.
Run alone, they need `eval "$(scripts/stack env)"` first; without it they fail loudly
instead of skipping, so a green run always means the servers were really exercised.
"""

from __future__ import annotations

import os
import uuid

import pytest

# The session-scoped Spark fixture, defined once for every folder: two definitions (one per
# folder's conftest) made two fixtures of one SparkSession, and the second to stop it at the
# end of the run found its gateway gone.
from core.spark_session import spark  # noqa: F401


def _required_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the tests with scripts/test, or eval \"$(scripts/stack env)\" first")
    return value


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    return _required_env("TWOPHASE_PG_DSN")


@pytest.fixture(scope="session")
def admin_dsn() -> str:
    """The stack's Postgres superuser over its private socket (tests that create roles)."""
    return _required_env("TWOPHASE_PG_ADMIN_DSN")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return _required_env("TWOPHASE_KAFKA_BOOTSTRAP")


@pytest.fixture(scope="session")
def iceberg_catalog() -> str:
    """The stack's Iceberg catalog: pyiceberg properties as JSON (scripts/stack env)."""
    return _required_env("TWOPHASE_ICEBERG_CATALOG")


@pytest.fixture
def unique_name(request) -> str:
    """A name no other test (or earlier run) uses: for topics, tables, ids."""
    base = "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:30]
    return f"t_{base}_{uuid.uuid4().hex[:8]}"
