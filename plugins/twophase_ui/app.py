"""The Transactions page's FastAPI app, mounted by the api-server under /twophase.

    GET /                    the loads, newest first (?pipeline=&state=&limit=, default 200)
    GET /loads/{load_id}     one load: votes, transition history, metrics, prepare error, input
    GET /api/loads           the list as JSON (same filters)
    GET /api/loads/{load_id} one load as JSON

Every route requires an Airflow login (auth.require_user); Airflow does not protect
plugin routes itself. Handlers are plain functions: FastAPI runs them in its thread
pool, so psycopg2's blocking calls do not stall the api-server's event loop.
"""

from __future__ import annotations

import logging
from dataclasses import asdict

import psycopg2
from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from twophase.errors import ServerUnreachable
from twophase.log import UnknownLoad
from twophase.protocol.states import State

from . import queries, render
from .auth import Forbidden, NotAuthenticated, login_url, require_user
from .connection import CONN_ID, NoConnection, pg_dsn
from .links import dag_run_url

log = logging.getLogger(__name__)

app = FastAPI(title="twophase transactions", docs_url=None, redoc_url=None, openapi_url=None,
              dependencies=[Depends(require_user)])


class BadFilter(ValueError):
    status_code = 400


class LogUnavailable(RuntimeError):
    status_code = 503


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith(f"{request.scope.get('root_path', '')}/api/")


@app.exception_handler(NotAuthenticated)
@app.exception_handler(Forbidden)
@app.exception_handler(BadFilter)
@app.exception_handler(UnknownLoad)
@app.exception_handler(LogUnavailable)
async def _refused(request: Request, exc: Exception):
    status = getattr(exc, "status_code", 404)  # UnknownLoad: 404
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    message = str(exc)
    if _wants_json(request):
        return JSONResponse({"detail": message}, status_code=status, headers=headers)
    link = None
    if status == 401:
        link = (login_url(next_url=str(request.url.path)), "Log in to Airflow")
    elif status == 404:
        link = (str(request.url_for("transactions").path), "All transactions")
    title = {401: "Not logged in", 403: "Not allowed", 400: "Bad filter", 503: "Transaction log unavailable"}
    return HTMLResponse(render.message_page(title.get(status, "Not found"), message, link),
                        status_code=status, headers=headers)


def _dsn() -> str:
    try:
        return pg_dsn()
    except NoConnection as exc:
        raise LogUnavailable(str(exc)) from None


def _read(call, *args, **kwargs):
    """Run a query; an unreachable server is a 503 that names neither DSN nor password."""
    try:
        return call(*args, **kwargs)
    except (psycopg2.OperationalError, ServerUnreachable) as exc:
        log.warning("transactions page: the pipeline's Postgres is unreachable (%s)", type(exc).__name__)
        raise LogUnavailable(f"cannot reach the pipeline's Postgres (connection {CONN_ID!r})") from None


def _state(value: str | None) -> str | None:
    if not value:
        return None
    if value not in State.__members__:
        raise BadFilter(f"unknown state {value!r}; one of: {', '.join(State.__members__)}")
    return value


Limit = Query(queries.DEFAULT_LIMIT, ge=1, le=queries.MAX_LIMIT)


def _summary(summary: queries.LoadSummary) -> dict:
    """The keys of `python -m twophase status --json`, plus the DAG run's URL in the UI."""
    return {**summary.to_json(), "dag_run_url": dag_run_url(summary.pipeline, summary.run_id)}


@app.get("/", response_class=HTMLResponse, name="transactions")
def transactions(request: Request, pipeline: str | None = None, state: str | None = None, limit: int = Limit):
    dsn, state = _dsn(), _state(state)
    rows = _read(queries.list_loads, dsn, pipeline or None, state, limit)
    return render.list_page(rows, pipelines=_read(queries.pipelines, dsn), pipeline=pipeline or None,
                            state=state, limit=limit,
                            detail_url=lambda load_id: str(request.url_for("load", load_id=load_id).path))


@app.get("/loads/{load_id}", response_class=HTMLResponse, name="load")
def load(request: Request, load_id: str):
    detail = _read(queries.load_detail, _dsn(), load_id)
    return render.detail_page(detail, list_url=str(request.url_for("transactions").path))


@app.get("/api/loads")
def api_loads(pipeline: str | None = None, state: str | None = None, limit: int = Limit) -> list[dict]:
    return [_summary(r) for r in _read(queries.list_loads, _dsn(), pipeline or None, _state(state), limit)]


@app.get("/api/loads/{load_id}")
def api_load(load_id: str) -> dict:
    detail = _read(queries.load_detail, _dsn(), load_id)
    load = detail.load
    return {**asdict(load), "state": load.state.value, "dag_run_url": dag_run_url(load.pipeline, load.run_id),
            "votes": {name: v.to_json() for name, v in detail.votes.items()},
            "history": [asdict(t) for t in detail.history]}
