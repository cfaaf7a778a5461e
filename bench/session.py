"""The one Spark session every Spark contender runs in: local[*], the peers' jars."""

from __future__ import annotations

import os

from . import jars
from .data import ROOT


def start(driver_memory: str):
    from pyspark.sql import SparkSession

    # Python workers unpickle bench.staging's functions: they need the checkout on their path.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*paths, str(ROOT)]))
    spark = (SparkSession.builder.master("local[*]").appName("twophase-bench")
            .config("spark.jars", ",".join(jars.ensure()))
            .config("spark.driver.memory", driver_memory)
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    # Spark caches its Kafka producers: they keep asking for the topics each repetition deleted.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.kafka", jvm.org.apache.logging.log4j.Level.ERROR)
    return spark
