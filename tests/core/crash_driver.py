"""Runs one load through the coordinator in its own process, for the crash tests.

usage: crash_driver.py TABLE TOPIC RUN_ID ROWS MIN_ROWS
A failpoint (TWOPHASE_FAILPOINT) kills this process, or a Spark worker, part-way.
"""

import sys

from pyspark.sql import SparkSession

from support import make_df, make_spec
from twophase import coordinator
from twophase.log import TransactionLog
from twophase.spec import Connections
from twophase.states import State
from twophase.voting import MinRows

table, topic, run_id, rows, min_rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
spark = (SparkSession.builder.master("local[2, 4]").config("spark.ui.enabled", "false").getOrCreate())
conns = Connections.from_env()
log = TransactionLog(conns.pg_dsn)
spec = make_spec({"table": table, "topic": topic}, run_id=run_id)
coordinator.begin(log, spec)
coordinator.prepare(log, conns, spec.load_id, make_df(spark, rows))
decided = coordinator.vote(log, conns, spec.load_id, rules=[MinRows(min_rows)])
if decided.state == State.COMMITTING:
    coordinator.commit(log, conns, spec.load_id)
else:
    coordinator.rollback(log, conns, spec.load_id)
print(f"final state {log.get(spec.load_id).state}")
