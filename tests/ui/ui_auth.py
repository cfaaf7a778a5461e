"""Logins for the Transactions pages' tests: tokens minted by Airflow's own auth manager
with the stack's JWT secret, as the Airflow UI holds them after a login."""

from __future__ import annotations

import os

import pytest


def require_jwt_secret() -> None:
    """Without the stack's secret Airflow would sign and check with a random one of this
    process, and the tests would prove nothing about the configured login."""
    if not os.environ.get("AIRFLOW__API_AUTH__JWT_SECRET"):
        pytest.fail('AIRFLOW__API_AUTH__JWT_SECRET is not set: eval "$(scripts/stack env)" first')


def mint(role: str | None = "viewer", **kwargs) -> str:
    """A token of user ui-test with `role` (None: no role at all)."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return create_auth_manager().generate_jwt(SimpleAuthManagerUser(username="ui-test", role=role), **kwargs)


def viewer_token() -> str:
    """A viewer's token, from the auth manager the stack configures."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    assert isinstance(create_auth_manager(), SimpleAuthManager), "the stack configures SimpleAuthManager"
    return mint()


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}
