"""Fixtures of the log contract suite: `log`, once per implementation of the transaction
log (twophase/log): `memory` (serverless) and `postgres` (the stack's database, in its
schema twophase). `-m serverless` runs the memory ones alone."""

from __future__ import annotations

import pytest

IMPLEMENTATIONS = ("memory", "postgres")


def pytest_generate_tests(metafunc):
    if "log" in metafunc.fixturenames:
        metafunc.parametrize("log", [pytest.param(kind, id=kind, marks=[pytest.mark.serverless] if kind == "memory"
                                                  else []) for kind in IMPLEMENTATIONS], indirect=True)


@pytest.fixture
def log(request):
    from twophase.log import MemoryLog, PostgresLog

    if request.param == "memory":
        return MemoryLog()
    log = PostgresLog(request.getfixturevalue("pg_dsn"))
    log.ensure_schema()
    return log
