"""Who may see the Transactions page: the users Airflow itself lets in.

Airflow does not authenticate plugin routes, so every route depends on `require_user`.
It takes the JWT the Airflow UI holds (cookie `_token`, set at login) or an explicit
`Authorization: Bearer <token>` (which wins, as in Airflow's own API), and has Airflow's
auth manager validate it (`get_user_from_token`: signature with the configured
[api_auth] jwt_secret or keys, expiry, audience, revoked tokens). The user must then be
allowed to read DAG runs, since a load is one. Missing, invalid or expired: 401;
authenticated but not allowed: 403.

A load is a run of its pipeline's DAG (one per pipeline: the DAG that began its loads,
logged with each; the pipeline's name for loads logged before, or outside Airflow): a user
sees the loads of the DAGs whose runs the auth manager lets them read (`may_read`,
`readable`), and nothing of the others, neither on the list nor on a load's or a
pipeline's page.
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
    request.state.user = user
    return user


def may_read(user: "BaseUser", dag_id: str) -> bool:
    """Whether the user may read the runs of DAG `dag_id` (a pipeline's loads)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return auth_manager().is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN,
                                            details=DagDetails(id=dag_id), user=user)


def readable(user: "BaseUser", dags: dict[str, str]) -> list[str]:
    """The pipelines among `dags` ({pipeline: the DAG that loads it}) whose DAG's runs the
    user may read, in their order."""
    return [pipeline for pipeline, dag_id in dags.items() if may_read(user, dag_id)]


def require_dag(request: Request, dag_id: str) -> None:
    """Forbidden unless the request's user may read the runs of DAG `dag_id`; the refusal
    names neither the DAG nor anything of its loads."""
    user = request.state.user
    if not may_read(user, dag_id):
        raise Forbidden(f"user {user.get_name()!r} may not read the runs of this load's or pipeline's DAG")


def login_url(next_url: str) -> str:
    return auth_manager().get_url_login(next_url=next_url)
