"""Runs one load, or part of it, through the coordinator in its own process, for the crash
tests.

usage: crash_driver.py MANY_JSON RUN_ID ROWS MIN_ROWS [prepare-only | decide]
MANY_JSON: the targets of the `many` fixture (support.many_spec: three tables over two
databases, two topics, an Iceberg table; with "last", the second database commits last).
A failpoint (TWOPHASE_FAILPOINT) kills this process, or a Spark worker, part-way (or
pauses it: TWOPHASE_FAILPOINT_WAIT). With no mode: begin, prepare, vote and phase 2.
`prepare-only`: begin and prepare, as the prepare task does, then exit. `decide`: the vote
and phase 2 of a load prepared already, as the vote and the commit or rollback tasks do;
this mode starts no Spark. TWOPHASE_TEST_SPARK_MASTER: a master other than
local mode (the stack's cluster: its executors get the twophase package as a py-file, one core
each, so two drivers at once both get executors).
"""

import json
import os
import sys
import tempfile
from pathlib import Path

from support import REPORTING, many_spec
from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows


def spark_session():
    from pyspark.sql import SparkSession

    from spark_session import java_options

    master = os.environ.get("TWOPHASE_TEST_SPARK_MASTER", "local[2, 4]")
    builder = java_options(SparkSession.builder.master(master).config("spark.ui.enabled", "false"))
    if not master.startswith("local"):
        builder = (builder.config("spark.cores.max", "1").config("spark.executor.cores", "1")
                   .config("spark.executor.memory", "1g"))
    spark = builder.getOrCreate()
    if not master.startswith("local"):
        from twophase_airflow.prepare_operator import package_zip

        spark.sparkContext.addPyFile(str(package_zip(Path(tempfile.mkdtemp()))))
    return spark


def main(many: dict, run_id: str, rows: int, min_rows: int, mode: str | None) -> None:
    env = Connections.from_env()
    conns = Connections(env.pg_dsn, env.kafka_bootstrap,
                        {REPORTING: ("postgres", os.environ["TWOPHASE_REPORTING_DSN"])},
                        iceberg_catalog=env.iceberg_catalog)
    log = PostgresLog(conns.pg_dsn)
    spec = many_spec(many, run_id)
    if mode != "decide":
        from support import many_frames

        coordinator.begin(log, spec, conns)
        coordinator.prepare(log, conns, spec.load_id, many_frames(spark_session(), rows))
        if mode == "prepare-only":
            print(f"prepared: state {log.get(spec.load_id).state}")
            return
    decided = coordinator.vote(log, conns, spec.load_id, rules=[MinRows(min_rows)])
    if decided.state == State.COMMITTING:
        coordinator.commit(log, conns, spec.load_id)
    else:
        coordinator.rollback(log, conns, spec.load_id)
    print(f"final state {log.get(spec.load_id).state}")


if __name__ == "__main__":
    mode = sys.argv[5] if len(sys.argv) > 5 else None
    if mode not in (None, "prepare-only", "decide"):
        sys.exit(f"unknown mode {mode!r}: prepare-only or decide")
    main(json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), mode)
