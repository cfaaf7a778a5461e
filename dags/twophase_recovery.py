"""twophase_recovery: resolves loads a crash left in doubt, every 10 minutes, and at once
when a decided load's commit or rollback task dies (its watcher in Airflow's triggerer
sees a decided load that nobody drives: twophase_airflow/watcher.py).

Presumed abort for loads with no decision past the deadline (param, default 120
minutes), and at once for a load whose approval waits on a run that has ended (nobody
can answer it any more); re-drives commit or rollback for decided ones (and fails, naming them, when one
still cannot finish past a limit: param, default 60 minutes); cleans orphaned prepared
transactions and staging tables; deletes rejected lines kept in the quarantine longer
than its retention (param, default 7 days). The param pipeline limits all of it to one
pipeline (default: every pipeline, or the one TWOPHASE_RECOVERY_PIPELINE names for an
Airflow that runs only that pipeline's loads). Safe to run while pipelines run.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import AssetOrTimeSchedule, DeltaTriggerTimetable, Param, dag, task

from twophase_airflow.watcher import driverless_asset

PIPELINE = os.environ.get("TWOPHASE_RECOVERY_PIPELINE", "")


@dag(dag_id="twophase_recovery", schedule=AssetOrTimeSchedule(timetable=DeltaTriggerTimetable(timedelta(minutes=10)),
                                                              assets=driverless_asset(PIPELINE)),
     start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, max_active_runs=1, tags=["twophase"], doc_md=__doc__,
     params={"deadline_minutes": Param(120, type="integer", minimum=1, title="Decision deadline (minutes)",
                                       description="Loads undecided for longer are presumed aborted."),
             "stuck_minutes": Param(60, type="integer", minimum=1, title="Stuck after (minutes)",
                                    description="A decided load that still cannot finish this long after its "
                                                "decision fails the run, named (it is still retried)."),
             "quarantine_days": Param(7, type="integer", minimum=1, title="Quarantine retention (days)",
                                      description="Rejected lines kept longer are deleted from twophase.quarantine."),
             "pipeline": Param(PIPELINE, type="string",
                               title="Only this pipeline",
                               description="Empty: every pipeline. A name: only its loads, orphans and "
                                           "quarantined lines.")})
def twophase_recovery():
    @task(retries=1)
    def recover(params=None, ti=None) -> None:
        from twophase_airflow.recover import recover_all

        recover_all(timedelta(minutes=params["deadline_minutes"]),
                    quarantine_retention=timedelta(days=params["quarantine_days"]), pipeline=params["pipeline"] or None,
                    stuck_after=timedelta(minutes=params["stuck_minutes"]), run_state=ti.get_dagrun_state)

    recover()


twophase_recovery()
