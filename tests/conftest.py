"""Shared fixtures: the real servers of the local stack (see scripts/stack).

Tests run through `scripts/test`, which brings the stack up and exports its environment.
Run alone, they need `eval "$(scripts/stack env)"` first; without it they fail loudly
instead of skipping, so a green run always means the servers were really exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
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


@pytest.fixture
def shared_catalog(tmp_path):
    """An Iceberg catalog of this test (same database as the stack's, a name of its own) whose
    warehouse executors on the cluster's worker can reach; TWOPHASE_ICEBERG_CATALOG names it
    meanwhile, and its tables are purged at the end."""
    from twophase.participants.iceberg import catalog_of

    stack = os.environ["TWOPHASE_ICEBERG_CATALOG"]
    catalog = json.dumps({**json.loads(stack), "name": f"shared_{uuid.uuid4().hex[:8]}",
                          "warehouse": (tmp_path / "warehouse").as_uri()})
    os.environ["TWOPHASE_ICEBERG_CATALOG"] = catalog
    try:
        yield catalog
    finally:
        cat = catalog_of(catalog)
        for namespace in cat.list_namespaces():
            for identifier in cat.list_tables(namespace):
                cat.purge_table(identifier)
        os.environ["TWOPHASE_ICEBERG_CATALOG"] = stack


def pytest_collection_modifyitems(items):
    """The tests marked `cluster` run last, together, so the stack's cluster (started by
    their `stack_cluster` fixture) is up only while they run: idle, it still takes CPU."""
    items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)


@pytest.fixture(scope="session")
def stack_cluster():
    """The stack's cluster up (`scripts/stack cluster up`), its environment
    (TWOPHASE_CLUSTER_*, AIRFLOW_CONN_SPARK_CLUSTER, ...) in os.environ; stopped at the end
    of the session if this fixture started it."""
    from support import ROOT, localstack

    stack = str(ROOT / "scripts" / "stack")
    started = subprocess.run([stack, "cluster", "status"], capture_output=True).returncode != 0
    up = subprocess.run([stack, "cluster", "up"], capture_output=True, text=True, timeout=900)
    if up.returncode != 0:
        pytest.fail(f"scripts/stack cluster up failed:\n{up.stdout[-2000:]}{up.stderr[-2000:]}")
    os.environ.update(localstack("cluster").environment())  # what `scripts/stack cluster env` prints
    yield
    if started:
        subprocess.run([stack, "cluster", "down"], capture_output=True, timeout=300)
