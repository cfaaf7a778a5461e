"""Thin Airflow glue over the twophase core: a DAG factory, its tasks, the prepare operator.

    from twophase_airflow import IcebergTable, LoadConfig, Table, Topic, load_params, two_phase_load
"""

from .assets import iceberg_asset, table_asset, topic_asset
from .config import Interval, LoadConfig
from .factory import load_params, two_phase_load
from .targets import IcebergTable, Table, Topic

__all__ = ["IcebergTable", "Interval", "LoadConfig", "Table", "Topic", "iceberg_asset", "load_params", "table_asset",
           "topic_asset", "two_phase_load"]
