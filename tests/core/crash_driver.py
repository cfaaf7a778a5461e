"""Runs one load through the coordinator in its own process, for the crash tests.

usage: crash_driver.py MANY_JSON RUN_ID ROWS MIN_ROWS [prepare-only]
MANY_JSON: the targets of the `many` fixture (support.many_spec: three tables over two
databases, two topics, an Iceberg table). A failpoint (TWOPHASE_FAILPOINT) kills this process, or
a Spark worker, part-way (or pauses it: TWOPHASE_FAILPOINT_WAIT). `prepare-only`: begin and
prepare, as the prepare task does, then exit. TWOPHASE_TEST_SPARK_MASTER: a master other than
local mode (the stack's cluster: its executors get the twophase package as a py-file, one core
each, so two drivers at once both get executors).
"""

import json
import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from spark_session import java_options
from support import REPORTING, many_frames, many_spec
from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows

many, run_id, rows, min_rows = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
master = os.environ.get("TWOPHASE_TEST_SPARK_MASTER", "local[2, 4]")
builder = java_options(SparkSession.builder.master(master).config("spark.ui.enabled", "false"))
if not master.startswith("local"):
    builder = (builder.config("spark.cores.max", "1").config("spark.executor.cores", "1")
               .config("spark.executor.memory", "1g"))
spark = builder.getOrCreate()
if not master.startswith("local"):
    from twophase_airflow.prepare_operator import package_zip

    spark.sparkContext.addPyFile(str(package_zip(Path(tempfile.mkdtemp()))))
env = Connections.from_env()
conns = Connections(env.pg_dsn, env.kafka_bootstrap, {REPORTING: ("postgres", os.environ["TWOPHASE_REPORTING_DSN"])},
                    iceberg_catalog=env.iceberg_catalog)
log = PostgresLog(conns.pg_dsn)
spec = many_spec(many, run_id)
coordinator.begin(log, spec)
coordinator.prepare(log, conns, spec.load_id, many_frames(spark, rows))
if sys.argv[5:] == ["prepare-only"]:
    print(f"prepared: state {log.get(spec.load_id).state}")
    sys.exit(0)
decided = coordinator.vote(log, conns, spec.load_id, rules=[MinRows(min_rows)])
if decided.state == State.COMMITTING:
    coordinator.commit(log, conns, spec.load_id)
else:
    coordinator.rollback(log, conns, spec.load_id)
print(f"final state {log.get(spec.load_id).state}")
