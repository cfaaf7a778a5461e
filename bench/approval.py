"""From a person's approval to visible data, on the real Airflow (scheduler, LocalExecutor).

    python -m bench.approval [--reps 3] [--lines 2000] [--read-s 10]

Needs the stack and its Airflow: scripts/stack up && scripts/stack airflow-up; eval
"$(scripts/stack env)". Each repetition triggers the example DAG for a fresh day with *Ask
for approval* on, waits until its approve task asks, reads the request for 10 s (--read-s)
as a person would, approves it through the REST API (PATCH .../hitlDetails) and waits for the run to
end. The figure is the load's `approval_to_visible_s` (`python -m twophase show`): from
the answer to the end of the commit, which covers Airflow resuming the approve task and
scheduling vote, commit and their work. Prints each run's figure and their median. The
DAG is unpaused first (the stack's DAGs are paused at creation; a run of a paused DAG waits).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import date, timedelta
from pathlib import Path

import requests

from orders_sample.generate import generate
from twophase.connections import Connections
from twophase.gates.approval import to_visible_s
from twophase.ids import load_id_for
from twophase.log import PostgresLog, TransactionLog

ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "orders_daily_totals"


class Airflow:
    """The few REST calls a person's script makes (tests/ui/airflow_api.py has them all)."""

    def __init__(self):
        url, _, user, _, password = subprocess.run([str(ROOT / "scripts/stack"), "login"], capture_output=True,
                                                   text=True, check=True).stdout.split()
        token = requests.post(f"{url}/auth/token", json={"username": user, "password": password}, timeout=30)
        token.raise_for_status()
        self.api, self.headers = f"{url}/api/v2", {"Authorization": f"Bearer {token.json()['access_token']}"}

    def call(self, method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, self.api + path, headers=self.headers, timeout=30, **kwargs)

    def wait(self, what: str, check, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")
            time.sleep(1)


def one_run(airflow: Airflow, landing: Path, txlog: TransactionLog, lines: int, read_s: float) -> float:
    day = _fresh_day(txlog)
    generate(landing, day, lines, bad_share=0.0)
    run_id = f"bench_approval_{uuid.uuid4().hex[:8]}"
    runs = f"/dags/{DAG_ID}/dagRuns"
    airflow.call("POST", runs, json={"dag_run_id": run_id, "logical_date": None,
                                     "conf": {"date": day.isoformat(), "approval": True}}).raise_for_status()
    task = f"{runs}/{run_id}/taskInstances/approve"
    airflow.wait(f"the approve task of {run_id} asking",
                 lambda: airflow.call("GET", task).json().get("state") == "awaiting_input")
    time.sleep(read_s)  # a person reads the request first
    airflow.call("PATCH", f"{task}/-1/hitlDetails", json={"chosen_options": ["Approve"], "params_input": {}}
                 ).raise_for_status()
    airflow.wait(f"run {run_id} ending",
                 lambda: airflow.call("GET", f"{runs}/{run_id}").json().get("state") in ("success", "failed"))
    load = txlog.get(load_id_for(DAG_ID, run_id))
    seconds = to_visible_s(load.approval, load.finished_at)
    if seconds is None:
        raise RuntimeError(f"run {run_id}: load {load.load_id} is {load.state}: {load.reason}")
    return seconds


def _fresh_day(txlog: TransactionLog):
    """A day no load of the pipeline has touched."""
    taken = {x.data_interval_start.date() for x in txlog.recent(100_000, DAG_ID) if x.data_interval_start}
    day = date(2090, 1, 1) + timedelta(days=uuid.uuid4().int % 3000)
    while day in taken:
        day += timedelta(days=1)
    return day


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.approval", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--lines", type=int, default=2000, help="input lines of each day")
    parser.add_argument("--read-s", type=float, default=10.0, help="seconds a person reads the request before "
                        "approving (default 10)")
    args = parser.parse_args(argv)
    conns = Connections.from_env()
    txlog, airflow = PostgresLog(conns.pg_dsn), Airflow()
    unpaused = airflow.call("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
    unpaused.raise_for_status()
    print(f"{DAG_ID} unpaused (its triggered runs wait while it is paused)", file=sys.stderr, flush=True)
    landing = Path(os.environ.get("ORDERS_DATA", ROOT / ".stack" / "data" / "orders")) / "landing"  # as the DAG's
    figures = []
    for rep in range(args.reps):
        figures.append(one_run(airflow, landing, txlog, args.lines, args.read_s))
        print(f"run {rep + 1}: {figures[-1]:.1f} s from approval to visible", file=sys.stderr, flush=True)
    print(f"approval to visible data, {args.reps} runs of {args.lines} input lines: median "
          f"{statistics.median(figures):.1f} s (runs: {', '.join(f'{f:.1f}' for f in figures)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
