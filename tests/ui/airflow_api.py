"""Airflow's public REST API (v2) as a person's script uses it: a token from the login,
then runs, task instances and human-in-the-loop answers."""

from __future__ import annotations

import json
import time

import requests


class AirflowApi:
    def __init__(self, url: str, user: str, password: str):
        self.url = url
        resp = requests.post(f"{url}/auth/token", json={"username": user, "password": password}, timeout=30)
        assert resp.status_code == 201, resp.text
        self.headers = {"Authorization": f"Bearer {resp.json()['access_token']}"}

    def _call(self, method: str, path: str, **kwargs) -> dict:
        resp = requests.request(method, f"{self.url}/api/v2{path}", headers=self.headers, timeout=30, **kwargs)
        assert resp.ok, f"{method} {path}: {resp.status_code} {resp.text}"
        return resp.json()

    def unpause(self, dag_id: str, timeout: float = 180) -> None:
        """Unpause the DAG once the dag-processor has registered it (DAGs are paused at
        creation)."""
        deadline = time.monotonic() + timeout
        while True:
            resp = requests.patch(f"{self.url}/api/v2/dags/{dag_id}", headers=self.headers, timeout=30,
                                  json={"is_paused": False})
            if resp.ok:
                assert resp.json()["is_paused"] is False, resp.text
                return
            assert resp.status_code == 404 and time.monotonic() < deadline, \
                f"unpausing {dag_id}: {resp.status_code} {resp.text}"
            time.sleep(2)

    def pause(self, dag_id: str) -> None:
        resp = self._call("PATCH", f"/dags/{dag_id}", json={"is_paused": True})
        assert resp["is_paused"] is True, resp

    def runs(self, dag_id: str, run_type: str | None = None, since: str | None = None,
             states: tuple[str, ...] = ()) -> list[dict]:
        """The DAG's runs, oldest first (the first 100): of one type, started at `since`
        (ISO) or later, in one of `states`."""
        query = {"order_by": "start_date", "limit": 100, **({"run_type": run_type} if run_type else {}),
                 **({"start_date_gte": since} if since else {}), **({"state": list(states)} if states else {})}
        return self._call("GET", f"/dags/{dag_id}/dagRuns", params=query)["dag_runs"]

    def reparse(self, dag_id: str) -> None:
        """Have the dag-processor parse the DAG's file again now (its watchers start only at
        a parse that finds the DAG unpaused)."""
        token = self._call("GET", f"/dags/{dag_id}/details")["file_token"]
        resp = requests.put(f"{self.url}/api/v2/parseDagFile/{token}", headers=self.headers, timeout=30)
        assert resp.ok, f"reparsing {dag_id}: {resp.status_code} {resp.text}"

    def dag_params(self, dag_id: str) -> dict:
        """The DAG's params as Airflow serialized them: {name: {"value": default, ...}}."""
        return self._call("GET", f"/dags/{dag_id}/details")["params"]

    def returned(self, dag_id: str, run_id: str, task_id: str):
        """What the task returned (its XCom return_value), deserialized."""
        entry = self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value",
                           params={"deserialize": True})
        value = entry["value"]
        return json.loads(value) if isinstance(value, str) else value

    def trigger(self, dag_id: str, run_id: str, conf: dict, logical_date: str | None = None) -> None:
        self._call("POST", f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": logical_date,
                                                             "conf": conf})

    def fail_run(self, dag_id: str, run_id: str) -> None:
        self._call("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", json={"state": "failed"})

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        """The task's state; None also while the run has not made its task instances yet."""
        resp = requests.get(f"{self.url}/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}",
                            headers=self.headers, timeout=30)
        if resp.status_code == 404:
            return None
        assert resp.ok, f"task {task_id} of {run_id}: {resp.status_code} {resp.text}"
        return resp.json()["state"]

    def task(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def hitl(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails")

    def answer(self, dag_id: str, run_id: str, task_id: str, option: str) -> dict:
        return self._call("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails",
                          json={"chosen_options": [option], "params_input": {}})

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, states: set[str], timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.task_state(dag_id, run_id, task_id)
            if state in states:
                return state
            if self.run_state(dag_id, run_id) in ("success", "failed"):
                break
            time.sleep(3)
        raise AssertionError(f"task {task_id} of run {run_id} is {state}, not {sorted(states)}")

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(3)
        raise AssertionError(f"run {run_id} did not finish within {timeout:.0f} s")
