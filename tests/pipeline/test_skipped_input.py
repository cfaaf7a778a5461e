"""A pipeline that skips a run whose input did not land (WaitForInput then="skip"), through
`airflow dags test` of a DAG file of the test's own: the wait gives up, the load's tasks
are skipped, no load is logged, and the run is green with finish saying why. (Failing such
a run: test_hourly_pipeline.py; waiting until the input lands: tests/ui/test_late_input.py.)"""

from __future__ import annotations

import os
import re
import textwrap
import uuid

import pytest

from hourly_data import ROOT, HourRun
from twophase.ids import load_id_for
from twophase.log import PostgresLog, UnknownLoad
from warm_airflow import dags_test

DAG_FILE = textwrap.dedent('''
    from datetime import timedelta

    import pendulum
    from airflow.sdk import DAG

    from twophase_airflow import IntervalFolder, LoadConfig, Table, WaitForInput, load_params, two_phase_load

    with DAG({dag_id!r}, schedule="@daily", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
             params=load_params()):
        two_phase_load(LoadConfig(targets=[Table("analytics.never_loaded")], source=IntervalFolder(
            lambda interval: "{landing}/today",
            wait=WaitForInput(up_to=timedelta(0), then="skip", marker="_SUCCESS"))), application="never_run.py")
''')


def test_a_run_whose_input_did_not_land_is_skipped_green_without_a_load(tmp_path, pg_dsn):
    dag_id = f"waits_{uuid.uuid4().hex[:8]}"
    (tmp_path / "landing" / "today").mkdir(parents=True)  # there, but without its marker
    dag_file = tmp_path / "waits.py"
    dag_file.write_text(DAG_FILE.format(dag_id=dag_id, landing=tmp_path / "landing"))
    # `dags test -f` reads a file of the DAGs folder only: the test's folder is the run's.
    proc = dags_test([dag_id, "2026-11-20T00:00:00+00:00", "-f", str(dag_file)],
                     {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path)}, ROOT, timeout=300)
    output = proc.stdout + proc.stderr
    [(run_id, state)] = re.findall(r"DagRun Finished: .*? run_id=(\S+), .*? state=(\w+)", output) or [(None, None)]
    run = HourRun(run_id, state, output)
    missing = f"the input did not land within 0 s: file://{tmp_path}/landing/today: the folder has no _SUCCESS yet"
    assert state == "success", output[-4000:]
    assert missing in run.task_log("wait_for_input") and f"no load: {missing}" in run.task_log("finish")
    for task in ("begin", "prepare", "vote", "commit", "rollback"):
        assert f"[DAG TEST] starting task_id={task} " not in output, task
    with pytest.raises(UnknownLoad):
        PostgresLog(pg_dsn).get(load_id_for(dag_id, run_id))
