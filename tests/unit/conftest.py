"""The unit tests: pure logic, most of them without any server.

Every test here that asks for no server fixture is marked `serverless`, so
`python -m pytest -m serverless` runs them in seconds with no stack and no environment
(the coordinator over in-memory participants and log, the vote, the states, the rules...).
"""

from __future__ import annotations

import pytest

SERVER_FIXTURES = {"pg_dsn", "kafka_bootstrap", "conns", "txlog", "spark"}


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/unit/" in str(item.fspath).replace("\\", "/") and not SERVER_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.serverless)
