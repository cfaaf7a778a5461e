"""Airflow's public REST API (v2) as a person's script uses it: a token from the login,
then runs, task instances and human-in-the-loop answers."""

from __future__ import annotations

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

    def trigger(self, dag_id: str, run_id: str, conf: dict) -> None:
        self._call("POST", f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None, "conf": conf})

    def fail_run(self, dag_id: str, run_id: str) -> None:
        self._call("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}", json={"state": "failed"})

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self._call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        return self.task(dag_id, run_id, task_id)["state"]

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
