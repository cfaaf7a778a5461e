"""Links from a load to the Airflow UI.

The Airflow 3.3 UI routes a DAG run at `dags/:dagId/runs/:runId` under the UI's base path
([api] base_url's path; the React router in airflow/ui/dist declares that route, and the
UI's own links build `/dags/${dag_id}/runs/${run_id}`). A load's pipeline is its DAG id
and its run_id the DAG run's, for loads made by the DAG factory.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit


def ui_base_path() -> str:
    """Where the Airflow UI lives: the path of [api] base_url, '/' when unset
    (as airflow.api_fastapi.app.API_ROOT_PATH computes it)."""
    from airflow.configuration import conf

    path = urlsplit(conf.get("api", "base_url", fallback="") or "").path or "/"
    return path if path.endswith("/") else path + "/"


def dag_url(dag_id: str) -> str:
    """The DAG's page in the Airflow UI."""
    return f"{ui_base_path()}dags/{quote(dag_id, safe='')}"


def dag_run_url(dag_id: str, run_id: str) -> str:
    # ':' and '+' (in every scheduled or manual run id) stay as the UI's own links leave them.
    return f"{dag_url(dag_id)}/runs/{quote(run_id, safe=':+')}"
