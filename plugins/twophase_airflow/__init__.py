"""Thin Airflow glue over the twophase core: a DAG factory, its tasks, the prepare operator.

    from twophase_airflow import IcebergTable, LoadConfig, Table, Topic, load_params, two_phase_load
    from twophase_airflow import IntervalFolder, KafkaTopicSource, LandingFolder   # a pipeline's source
    from twophase_airflow import WaitForInput   # an IntervalFolder's late input
"""

from .config import Interval, LoadConfig
from .factory import load_params, two_phase_load
from .kinds.iceberg import IcebergTable, iceberg_asset
from .kinds.kafka import Topic, topic_asset
from .kinds.postgres import Table, table_asset
from .sources import IntervalFolder, KafkaTopicSource, LandingFolder, WaitForInput

__all__ = ["IcebergTable", "Interval", "IntervalFolder", "KafkaTopicSource", "LandingFolder", "LoadConfig", "Table",
           "Topic", "WaitForInput", "iceberg_asset", "load_params", "table_asset", "topic_asset", "two_phase_load"]
