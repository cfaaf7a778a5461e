"""python -m twophase_airflow status|show|recover|verify|abandon|migrate: the core's commands
(python -m twophase) with the connections the DAGs use: Airflow connections, found as the
tasks find them (the log's `twophase_postgres`, or TWOPHASE_LOG_CONN_ID; the default Kafka
cluster and Iceberg catalog; any other connection a load names, by its id). Run it where
Airflow's configuration is (AIRFLOW_HOME and its secrets backends); nothing else to set."""

import os
import sys

from twophase.errors import root_cause
from twophase.ops.cli import main
from twophase.spec import SpecError

from .connections import from_airflow
from .kinds.postgres import DEFAULT_CONN_ID


def connect():
    conn_id = os.environ.get("TWOPHASE_LOG_CONN_ID") or DEFAULT_CONN_ID
    try:
        return from_airflow(conn_id, lookup=True)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - Airflow's own errors, said in one line
        raise SpecError(f"cannot read the log's Airflow connection {conn_id!r}: {root_cause(exc)} (run this where "
                        "Airflow's configuration is: its AIRFLOW_HOME, its connections)") from None


sys.exit(main(connect=connect, prog="python -m twophase_airflow"))
