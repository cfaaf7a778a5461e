"""A tiny PySpark job for the stack test: sums 1..N on the cluster and writes the result."""

import json
import sys

from pyspark.sql import SparkSession

out_path, n = sys.argv[1], int(sys.argv[2])
spark = SparkSession.builder.appName("stack-smoke").getOrCreate()
total = spark.range(1, n + 1, numPartitions=4).groupBy().sum("id").collect()[0][0]
with open(out_path, "w") as f:
    json.dump({"total": total, "master": spark.sparkContext.master}, f)
spark.stop()
