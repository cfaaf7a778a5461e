"""What a two-phase pipeline loads where: the factory's one argument besides the job."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Callable

from twophase.spec import SpecError


@dataclass(frozen=True)
class LoadConfig:
    """A daily load of one Spark job's output into one table and one topic.

    - pipeline: the name in the transaction log and in load ids (default: the DAG id);
    - table: `schema.table`, with a `load_id text` column; `table_ddl` (optional) is run
      before each load and must be idempotent (`create table if not exists ...`);
    - day_column: the table's date column, whose rows of the day mode "replace" swaps;
    - topic, key_column: the Kafka topic and the column that keys its records;
    - describe_input(day, params, load_id) -> dict: what the job reads, logged with the
      load (the job gets it as spec.input).
    """

    table: str
    topic: str
    key_column: str
    describe_input: Callable[[date, dict, str], dict]
    day_column: str = "day"
    table_ddl: str | None = None
    pipeline: str | None = None
    kafka_partitions: int = 3
    pg_conn_id: str = "twophase_postgres"
    kafka_conn_id: str = "twophase_kafka"
    spark_conn_id: str = "spark_default"

    def __post_init__(self):
        if not callable(self.describe_input):
            raise SpecError("describe_input must be a function (day, params, load_id) -> dict")
