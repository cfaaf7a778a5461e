"""A user without permission on a pipeline's DAG sees nothing of its loads: not in the
list (of every pipeline, its filter, its JSON), not on a load's page, not on the
pipeline's page; the other pipelines' loads stay visible. The permissions are an auth
manager's (Airflow's SimpleAuthManager, which lets a role read every DAG, with the one
DAG refused, as a manager with per-DAG permissions such as FAB's refuses it)."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.spec import LoadSpec
from ui_auth import bearer


def refuse(monkeypatch, refused: str) -> None:
    """The auth manager refuses every request on DAG `refused`."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    import twophase_ui.auth

    class OneDagRefused(SimpleAuthManager):
        def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
            if details is not None and details.id == refused:
                return False
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)

    manager = OneDagRefused()
    monkeypatch.setattr(twophase_ui.auth, "auth_manager", lambda: manager)


@pytest.fixture
def without_the_dag(page_loads, monkeypatch):
    """The auth manager refuses every request on the pages' pipeline's DAG."""
    refuse(monkeypatch, page_loads["pipeline"])
    return page_loads["pipeline"]


@pytest.fixture
def renamed(pg_dsn):
    """A load of a pipeline named otherwise than the DAG that began it (LoadConfig(pipeline=...))."""
    suffix = uuid.uuid4().hex[:8]
    pipeline, dag_id = f"ui_renamed_{suffix}", f"ui_owner_{suffix}"
    spec = LoadSpec(load_id=load_id_for(pipeline, "run-1"), pipeline=pipeline, run_id="run-1", dag_id=dag_id,
                    targets=(PostgresTarget(f"analytics.ui_renamed_{suffix}"),))
    coordinator.begin(PostgresLog(pg_dsn), spec)
    return {"pipeline": pipeline, "dag_id": dag_id, "load_id": spec.load_id}


def _nothing_of(text: str, page_loads) -> None:
    for key in ("pipeline", "committed", "stuck", "waiting", "table", "topic"):
        assert page_loads[key] not in text, key


def test_a_user_without_permission_on_the_dag_sees_nothing_of_it(client: TestClient, token, page_loads,
                                                                 without_the_dag):
    pipeline = without_the_dag
    listed = client.get("/", headers=bearer(token))
    assert listed.status_code == 200
    _nothing_of(listed.text, page_loads)
    api = client.get("/api/loads", params={"limit": 2000}, headers=bearer(token))
    assert api.status_code == 200 and api.json(), "the other pipelines' loads stay"
    assert all(s["pipeline"] != pipeline for s in api.json())
    for path, params in (("/", {"pipeline": pipeline}), ("/api/loads", {"pipeline": pipeline}),
                         (f"/loads/{page_loads['committed']}", {}), (f"/api/loads/{page_loads['committed']}", {}),
                         (f"/loads/{page_loads['stuck']}", {}), (f"/pipelines/{pipeline}", {})):
        refused = client.get(path, params=params, headers=bearer(token))
        assert refused.status_code == 403, (path, refused.text)
        _nothing_of(refused.text, page_loads)


def test_with_permission_the_same_user_sees_it(client: TestClient, token, page_loads):
    listed = client.get("/api/loads", params={"pipeline": page_loads["pipeline"]}, headers=bearer(token))
    assert {s["load_id"] for s in listed.json()} >= {page_loads[k] for k in ("committed", "stuck", "waiting")}
    assert client.get(f"/pipelines/{page_loads['pipeline']}", headers=bearer(token)).status_code == 200
    assert f'<option value="{page_loads["pipeline"]}">' in client.get("/", headers=bearer(token)).text


def test_a_pipeline_named_otherwise_than_its_dag_answers_to_that_dags_permission(client: TestClient, token, renamed,
                                                                                monkeypatch):
    pipeline, load_id = renamed["pipeline"], renamed["load_id"]
    refuse(monkeypatch, pipeline)  # a DAG of the pipeline's name (there is none) refused: the pipeline stays
    assert client.get(f"/pipelines/{pipeline}", headers=bearer(token)).status_code == 200
    shown = client.get(f"/loads/{load_id}", headers=bearer(token))
    assert shown.status_code == 200 and f"/dags/{renamed['dag_id']}/runs/run-1" in shown.text
    assert f'<option value="{pipeline}">' in client.get("/", headers=bearer(token)).text

    refuse(monkeypatch, renamed["dag_id"])  # its DAG refused: nothing of it
    assert pipeline not in client.get("/", headers=bearer(token)).text
    for path in (f"/pipelines/{pipeline}", f"/loads/{load_id}", f"/api/loads/{load_id}"):
        assert client.get(path, headers=bearer(token)).status_code == 403, path
    assert client.get("/api/loads", params={"pipeline": pipeline}, headers=bearer(token)).status_code == 403
