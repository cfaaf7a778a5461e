"""Thin Airflow glue over the twophase core: a DAG factory, its tasks, the prepare operator.

    from twophase_airflow import LoadConfig, load_params, two_phase_load
"""

from .assets import table_asset, topic_asset
from .config import LoadConfig
from .factory import load_params, two_phase_load

__all__ = ["LoadConfig", "load_params", "table_asset", "topic_asset", "two_phase_load"]
