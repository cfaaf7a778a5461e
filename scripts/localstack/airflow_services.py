"""Airflow as a user runs it: api-server (the UI), scheduler, dag-processor, triggerer.

LocalExecutor, the metadata database `airflow` of the stack's Postgres (or the one
TWOPHASE_AIRFLOW_DB names), the project's DAGs (paused at creation, until a person
unpauses them), and one local login: user `admin`, with the password generated
for this checkout in the stack's secrets. `up` waits until the api-server answers and
reports the scheduler, dag-processor and triggerer healthy; `down` stops only these.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from . import airflow, secrets
from .proc import StackError, running_pid, start_detached, stop_pids, wait_until
from .settings import Ports, stack_dir, venv_bin

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
ADMIN = "admin"


def url() -> str:
    return f"http://127.0.0.1:{Ports.from_env().airflow}"


def settings() -> dict[str, str]:
    """What the four components (and the tasks they run) need on top of the stack's env."""
    base = url()
    return {
        "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(Ports.from_env().airflow),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(_passwords_file()),
        # Two cores: a few tasks at a time, and DAG files re-read every 30 s.
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
    }


def _passwords_file() -> Path:
    return airflow.home() / "simple_auth_manager_passwords.json"


def _running(component: str) -> int | None:
    # The api-server retitles itself "airflow api_server -- ...".
    return running_pid(_pidfile(component), (component, component.replace("-", "_")))


def _pidfile(component: str) -> Path:
    return stack_dir() / "airflow" / f"{component}.pid"


def _logfile(component: str) -> Path:
    return stack_dir() / "airflow" / "logs" / f"{component}.log"


def health() -> dict | None:
    try:
        with urllib.request.urlopen(f"{url()}/api/v2/monitor/health", timeout=3) as resp:
            return json.load(resp)
    except (OSError, ValueError):
        return None


def _healthy(component: str) -> bool:
    key = component.replace("-", "_")
    status = (health() or {}).get(key, {}).get("status")
    return status == "healthy"


def up(env: dict[str, str]) -> None:
    env = {**env, **settings()}
    path = _passwords_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({ADMIN: secrets.load()["airflow_admin_password"]}))
    path.chmod(0o600)
    if not _running("api-server") and health() is not None:
        raise StackError(f"port {Ports.from_env().airflow} already answers as an Airflow api-server this stack did not "
                         "start; stop it or set TWOPHASE_AIRFLOW_PORT")
    airflow_bin = str(venv_bin() / "airflow")
    for component in COMPONENTS:
        if _running(component):
            continue
        print(f"stack: starting Airflow {component}", flush=True)
        start_detached([airflow_bin, component], _pidfile(component), _logfile(component), env)
    wait_until(lambda: health() is not None and _running("api-server") is not None, 180, "Airflow api-server",
               _logfile("api-server"))
    for component in ("scheduler", "dag-processor", "triggerer"):
        wait_until(lambda: _healthy(component), 180, f"Airflow {component}", _logfile(component))


def down() -> None:
    running = {component: pid for component in COMPONENTS if (pid := _running(component))}
    if running:
        print(f"stack: stopping Airflow {', '.join(running)}", flush=True)
        stop_pids(list(running.values()))
    for component in COMPONENTS:
        _pidfile(component).unlink(missing_ok=True)


def status() -> str:
    running = [c for c in COMPONENTS if _running(c)]
    if not running:
        return "UI down (scripts/stack airflow-up starts it)"
    if health() is None:
        return f"UI starting ({', '.join(running)} running)"
    return f"UI up at {url()} (scripts/stack login prints the login), running: {', '.join(running)}"


def login() -> str:
    return f"{url()}  user {ADMIN}  password {secrets.load()['airflow_admin_password']}"


def require_up() -> None:
    if health() is None:
        raise StackError(f"Airflow is not answering at {url()}: run scripts/stack airflow-up")
