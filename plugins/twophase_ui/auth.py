"""Who may see the Transactions page: the users Airflow itself lets in.

Airflow does not authenticate plugin routes, so every route depends on `require_user`.
It takes the JWT the Airflow UI holds (cookie `_token`, set at login) or an explicit
`Authorization: Bearer <token>` (which wins, as in Airflow's own API), and has Airflow's
auth manager validate it (`get_user_from_token`: signature with the configured
[api_auth] jwt_secret or keys, expiry, audience, revoked tokens). The user must then be
allowed to read DAG runs, since a load is one. Missing, invalid or expired: 401;
authenticated but not allowed: 403.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

COOKIE = "_token"  # airflow.api_fastapi.auth.managers.base_auth_manager.COOKIE_NAME_JWT_TOKEN


class NotAuthenticated(Exception):
    status_code = 401


class Forbidden(Exception):
    status_code = 403


def auth_manager() -> "BaseAuthManager":
    """Airflow's auth manager: in the api-server the instance it initialized at start;
    elsewhere (tests) the same configured class, created once."""
    from airflow.api_fastapi.app import create_auth_manager

    return create_auth_manager()


def token_of(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.cookies.get(COOKIE) or None


async def require_user(request: Request) -> "BaseUser":
    """FastAPI dependency: the authenticated user allowed to read DAG runs, or an error."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from jwt import InvalidTokenError

    token = token_of(request)
    if token is None:
        raise NotAuthenticated("not logged in to Airflow")
    manager = auth_manager()
    try:
        user = await manager.get_user_from_token(token)
    except InvalidTokenError as exc:  # bad signature, expired, wrong audience, revoked...
        raise NotAuthenticated(f"the Airflow token is not valid ({type(exc).__name__})") from None
    if not manager.is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, user=user):
        raise Forbidden(f"user {user.get_name()!r} may not read DAG runs")
    return user


def login_url(next_url: str) -> str:
    return auth_manager().get_url_login(next_url=next_url)
