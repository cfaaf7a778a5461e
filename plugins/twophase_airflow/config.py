"""What a two-phase pipeline loads where: the factory's one argument besides the job."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Callable

from twophase import ids
from twophase.spec import KafkaTarget, PostgresTarget, SpecError


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

    Every name is checked here, with the core's own rules (twophase.spec, twophase.ids),
    so a wrong one fails the DAG file's import (Airflow's DAG import errors) instead of
    every run's begin task.
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
        for field in ("table", "topic", "key_column", "day_column"):
            if not isinstance(getattr(self, field), str):
                raise SpecError(f"LoadConfig {field} must be a string, got {getattr(self, field)!r}")
        _check("table", lambda: PostgresTarget(self.table))
        # The day column is what mode "replace" deletes by: the core checks it as such.
        _check("day_column", lambda: PostgresTarget(self.table, "replace", {self.day_column: "day"}),
               f"{self.day_column!r} must be a plain identifier (letters, digits, '_', not starting with a "
               "digit): the name of the table's date column")
        # topic, key_column and kafka_partitions: the core's messages name which one is wrong.
        _check("", lambda: KafkaTarget(self.topic, self.key_column, partitions=self.kafka_partitions))
        if self.pipeline is not None:
            check_pipeline(self.pipeline, "LoadConfig pipeline")
        if not callable(self.describe_input):
            raise SpecError("LoadConfig describe_input must be a function (day, params, load_id) -> dict, "
                            f"got {type(self.describe_input).__name__}")
        if self.table_ddl is not None and not (isinstance(self.table_ddl, str) and self.table_ddl.strip()):
            raise SpecError("LoadConfig table_ddl must be SQL text (create table if not exists ...) or None")
        for field in ("pg_conn_id", "kafka_conn_id", "spark_conn_id"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value.strip():
                raise SpecError(f"LoadConfig {field} must name an Airflow connection, got {value!r}")


def check_pipeline(pipeline, what: str = "pipeline name") -> None:
    """The pipeline name goes into every load id: the core's rule for it (twophase.ids)."""
    try:
        ids.load_id_for(pipeline, "check")
    except (ValueError, TypeError) as exc:
        raise SpecError(f"{what}: {exc}; set LoadConfig(pipeline=...) to such a name") from None


def _check(field: str, build: Callable[[], object], message: str | None = None) -> None:
    """Build the core's target from the config; when the core refuses, say so naming the field."""
    try:
        build()
    except (SpecError, TypeError, AttributeError) as exc:
        where = f"LoadConfig {field}".rstrip()
        raise SpecError(f"{where} {message}" if message else f"{where}: {exc}") from None
