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

pytest_plugins = ["timeline"]  # each test's start and end per worker (tests/timeline.py)


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
def stock_dsn() -> str:
    """The stack's stock Postgres (max_prepared_transactions = 0): its first database."""
    return _required_env("TWOPHASE_STOCK_DSN")


@pytest.fixture(scope="session")
def stock_reports_dsn() -> str:
    """The stack's stock Postgres: its second database."""
    return _required_env("TWOPHASE_STOCK_REPORTS_DSN")


@pytest.fixture(scope="session")
def reporting_dsn() -> str:
    """The stack's second database (scripts/stack creates it)."""
    dsn = os.environ.get("TWOPHASE_REPORTING_DSN")
    if not dsn:
        pytest.fail("TWOPHASE_REPORTING_DSN is not set: the stack's second database (eval \"$(scripts/stack env)\")")
    return dsn


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


# Tests that share one thing run on one worker, in turn (pytest-xdist's loadgroup cannot
# group under pytest 9: it renames node ids, which pytest 9 no longer reads): the running
# Airflow of tests/ui, the stack's cluster (tests marked `cluster`, started by their
# `stack_cluster` fixture), the bench's own pipeline, schema and topics (tests/bench).
CLUSTER_MODULES = ("tests/core/test_kafka_cluster_commit.py", "tests/pipeline/test_cluster_pipeline.py",
                   "tests/stack/test_cluster_stack.py")
# Modules marked `alone` as a whole: one unit of work each, so that the machine empties
# once for the module (its module-scoped fixtures run alone too), not once per test.
ALONE_MODULES = ("tests/core/test_long_history.py",)


def group_of(nodeid: str) -> str | None:
    """The group a test runs in (None: alone in its own unit of work)."""
    path = nodeid.split("::")[0]
    if path.startswith("tests/ui/"):
        return "ui"
    if path.startswith("tests/bench/"):
        return "bench"
    if path in CLUSTER_MODULES or nodeid.endswith("[cluster]"):
        return "cluster"
    if path in ALONE_MODULES:
        return path
    return None


def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduling by units of work, a unit per group (group_of) and per other test,
    handed out in collection order (pytest_collection_modifyitems) to the worker that has
    run out of work."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


def pytest_collection_modifyitems(items):
    """The order work goes out in, longest first, so that no long test starts last while
    the other workers idle: the UI tests and the cluster's (each group a long row on one
    worker, with waits that cost no CPU: the other workers fill the cores meanwhile), the
    benchmarks' toy runs, the DAG runs of tests/pipeline, the other tests marked slow, the
    rest; last, the tests that run alone (the other workers run out of work about then, so
    waiting for them to finish costs little). Without xdist the order is the same."""
    for item in items:
        for kind in ("ui", "cluster"):
            if item.get_closest_marker(kind) is not None and group_of(item.nodeid) != kind:
                raise pytest.UsageError(f"{item.nodeid} is marked {kind} but runs outside the group {kind!r} of "
                                        "tests/conftest.py's group_of: add its module there")
        if item.get_closest_marker("alone") is not None and item.nodeid.split("::")[0] not in ALONE_MODULES:
            raise pytest.UsageError(f"{item.nodeid} is marked alone outside tests/conftest.py's ALONE_MODULES: "
                                    "mark its module and add it there (the machine then empties once for it)")

    def rank(item) -> int:
        group = group_of(item.nodeid)
        if item.get_closest_marker("ui") is not None:
            return 0
        if group == "cluster":
            return 1
        if item.get_closest_marker("alone") is not None:
            return 6
        if group == "bench":
            return 2
        if item.nodeid.startswith("tests/pipeline/"):
            return 3
        return 4 if item.get_closest_marker("slow") is not None else 5
    items.sort(key=rank)


@pytest.fixture(scope="session")
def _run_locks(tmp_path_factory):
    """The lock files the workers of one parallel run share (tests/parallel.py); None
    when the tests run in one process."""
    from parallel import Locks

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return Locks(tmp_path_factory.getbasetemp().parent / "locks")  # basetemp: <run's folder>/popen-gwN


@pytest.fixture(scope="module", autouse=True)
def _module_alone(request, _run_locks):
    """A module marked `alone` (its module-scoped fixtures too) runs with no other test."""
    if _run_locks is None or request.node.get_closest_marker("alone") is None:
        yield False
        return
    with _run_locks.alone():
        yield True


@pytest.fixture(autouse=True)
def _together(_run_locks, _module_alone):
    """Each test runs beside others, unless its module runs alone."""
    if _run_locks is None or _module_alone:
        yield
        return
    with _run_locks.together():
        yield


_cluster_started_here = False  # this process started the stack's cluster: it stops it too


@pytest.fixture(scope="session")
def stack_cluster():
    """The stack's cluster up (`scripts/stack cluster up`), its environment
    (TWOPHASE_CLUSTER_*, AIRFLOW_CONN_SPARK_CLUSTER, ...) in os.environ. If this fixture
    started it, it stops after the last test of the group `cluster` (they run in a row on
    one worker: idle, the cluster still takes CPU from the tests that follow), or at the
    end of the session."""
    global _cluster_started_here
    from support import localstack

    _cluster_started_here = _stack("cluster", "status").returncode != 0
    up = _stack("cluster", "up", timeout=900)
    if up.returncode != 0:
        pytest.fail(f"scripts/stack cluster up failed:\n{up.stdout[-2000:]}{up.stderr[-2000:]}")
    os.environ.update(localstack("cluster").environment())  # what `scripts/stack cluster env` prints
    yield
    _stop_cluster()


def _stack(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    from support import ROOT

    return subprocess.run([str(ROOT / "scripts" / "stack"), *args], capture_output=True, text=True, timeout=timeout)


def _stop_cluster() -> None:
    global _cluster_started_here
    if _cluster_started_here:
        _stack("cluster", "down")
        _cluster_started_here = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of the group `cluster` (its fixtures torn down), stop the
    cluster if this process started it."""
    result = yield
    if group_of(item.nodeid) == "cluster" and (nextitem is None or group_of(nextitem.nodeid) != "cluster"):
        _stop_cluster()
    return result
