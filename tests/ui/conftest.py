"""What the tests of the running Airflow share: the Airflow itself (api-server, scheduler,
dag-processor, triggerer of `scripts/stack airflow-up`), started by the first test of a
module that needs it when it was not up, and stopped after that module."""

from __future__ import annotations

import pytest

from support import stack


@pytest.fixture(scope="module")
def airflow_ui():
    """(url, user, password) of a running Airflow; started here if it was not up."""
    started = "UI up at" not in stack("status")
    if started:
        stack("airflow-up")
    url, _, user, _, password = stack("login").split()
    yield url, user, password
    if started:
        stack("airflow-down")
