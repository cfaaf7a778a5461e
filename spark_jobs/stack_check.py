"""Smoke job of the stack check DAG: proves Spark runs where Airflow submits it.

Usage: spark-submit spark_jobs/stack_check.py N [RESULT_JSON_PATH]
"""

import json
import sys

from pyspark.sql import SparkSession

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
spark = SparkSession.builder.appName("twophase-stack-check").getOrCreate()
total = spark.range(1, n + 1, numPartitions=4).groupBy().sum("id").collect()[0][0]
expected = n * (n + 1) // 2
master = spark.sparkContext.master
print(f"stack_check: master={master} sum(1..{n})={total} expected={expected}")
spark.stop()
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        json.dump({"total": total, "master": master}, f)
if total != expected:
    sys.exit(f"stack_check: wrong sum {total}, expected {expected}")
