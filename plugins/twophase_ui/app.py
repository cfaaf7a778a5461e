"""The Transactions page's FastAPI app, mounted by the api-server under /twophase.

    GET /                       the loads, newest first (?pipeline=&state=&limit=, default 200)
    GET /loads/{load_id}        one load: its timeline, targets, audit, rejected lines, history, raw JSON
    GET /pipelines/{pipeline}   one pipeline: its loads not finished, its source's lag, its newest loads charted
    GET /api/loads              the list as JSON (same filters)
    GET /api/loads/{load_id}    one load as JSON

Every route requires an Airflow login (auth.require_user); Airflow does not protect
plugin routes itself. A user sees only the loads of the DAGs whose runs they may read
(auth.may_read): the list leaves the others out, their pages are refused. Handlers are
plain functions: FastAPI runs them in its thread pool, so psycopg2's blocking calls do not
stall the api-server's event loop.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from urllib.parse import urlencode

import psycopg2
from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from twophase.errors import ServerUnreachable
from twophase.log import UnknownLoad
from twophase.protocol.states import State

from . import queries, render, render_load, render_pipeline, source_lag
from .auth import Forbidden, NotAuthenticated, login_url, readable, require_dag, require_user
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
RECENT = 30  # the loads a pipeline's page charts, by default
Recent = Query(RECENT, ge=1, le=queries.MAX_LIMIT)


def _summary(summary: queries.LoadSummary) -> dict:
    """The keys of `python -m twophase status --json`, plus the DAG run's URL in the UI."""
    return {**summary.to_json(), "dag_run_url": dag_run_url(summary.dag_id or summary.pipeline, summary.run_id)}


def _pipelines(request: Request, dsn: str) -> tuple[list[str], bool]:
    """The pipelines whose loads the user may read, and whether that is every pipeline."""
    every = _read(queries.pipelines, dsn)
    allowed = readable(request.state.user, every)
    return allowed, len(allowed) == len(every)


def _loads(request: Request, dsn: str, pipeline: str | None, state: str | None, limit: int,
           readable_pipelines: tuple[list[str], bool] | None = None) -> list:
    """The newest loads the user may read: of one pipeline, or of all those they may read
    (`readable_pipelines`, _pipelines' answer, when the caller has it already)."""
    if pipeline:
        require_dag(request, _read(queries.dag_of, dsn, pipeline))
        return _read(queries.list_loads, dsn, pipeline, state, limit)
    allowed, every = readable_pipelines or _pipelines(request, dsn)
    return _read(queries.list_loads, dsn, None, state, limit, None if every else allowed)


def _detail(request: Request, load_id: str) -> queries.LoadDetail:
    detail = _read(queries.load_detail, _dsn(), load_id)
    require_dag(request, detail.load.dag_id or detail.load.pipeline)
    return detail


def _url(request: Request, name: str, **params) -> str:
    return str(request.url_for(name, **params).path)


@app.get("/", response_class=HTMLResponse, name="transactions")
def transactions(request: Request, pipeline: str | None = None, state: str | None = None, limit: int = Limit):
    dsn, state = _dsn(), _state(state)
    readable_pipelines = _pipelines(request, dsn)
    rows = _loads(request, dsn, pipeline or None, state, limit, readable_pipelines)
    return render.list_page(rows, pipelines=readable_pipelines[0], pipeline=pipeline or None,
                            state=state, limit=limit, detail_url=lambda load_id: _url(request, "load", load_id=load_id),
                            pipeline_url=lambda name: _url(request, "pipeline", pipeline=name))


@app.get("/loads/{load_id}", response_class=HTMLResponse, name="load")
def load(request: Request, load_id: str):
    detail = _detail(request, load_id)
    return render_load.load_page(detail, list_url=_url(request, "transactions"),
                                 pipeline_url=_url(request, "pipeline", pipeline=detail.load.pipeline))


@app.get("/pipelines/{pipeline}", response_class=HTMLResponse, name="pipeline")
def pipeline(request: Request, pipeline: str, limit: int = Recent):
    dsn = _dsn()
    dag_id = _read(queries.dag_of, dsn, pipeline)
    require_dag(request, dag_id)
    data = _read(queries.pipeline_loads, dsn, pipeline, limit)
    list_url = f"{_url(request, 'transactions')}?{urlencode({'pipeline': pipeline})}"
    return render_pipeline.pipeline_page(pipeline, dag_id, data, source_lag.lags(dsn, data.sources), list_url=list_url,
                                         load_url=lambda load_id: _url(request, "load", load_id=load_id))


@app.get("/api/loads")
def api_loads(request: Request, pipeline: str | None = None, state: str | None = None,
              limit: int = Limit) -> list[dict]:
    return [_summary(r) for r in _loads(request, _dsn(), pipeline or None, _state(state), limit)]


@app.get("/api/loads/{load_id}")
def api_load(request: Request, load_id: str) -> dict:
    detail = _detail(request, load_id)
    load = detail.load
    return {**asdict(load), "state": load.state.value,
            "dag_run_url": dag_run_url(load.dag_id or load.pipeline, load.run_id),
            "votes": {name: v.to_json() for name, v in detail.votes.items()},
            "history": [asdict(t) for t in detail.history]}
