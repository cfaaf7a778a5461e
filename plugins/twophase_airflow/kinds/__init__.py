"""Every kind of target in Airflow, one record each (shared.AirflowKind): the twin of the
core's twophase.participants.kinds. A new kind adds its module here and one line in KINDS.

    Table("analytics.customer_daily_totals", interval_column="day")
    Table("analytics.daily_summary", interval_column="day", frame="summary")
    Table("reporting.totals", conn_id="reporting_postgres")          # a second database
    Topic("customer-daily-totals", key_column="customer_id")
    Topic("totals-eu", key_column="customer_id", conn_id="kafka_eu")  # a second cluster
    IcebergTable("analytics.customer_daily_totals", columns={...}, partition_by=("day",))

Tables of one database commit in one prepared transaction, topics of one cluster in one
Kafka transaction, each Iceberg table in one catalog commit; the load commits all of them
atomically. At run time each target becomes the core's target (`core()`) for the run's
data interval.
"""

from __future__ import annotations

from .iceberg import ICEBERG
from .kafka import KAFKA
from .postgres import POSTGRES
from .shared import AirflowKind

KINDS: dict[str, AirflowKind] = {record.kind: record for record in (POSTGRES, KAFKA, ICEBERG)}
TARGET_CLASSES = tuple(record.target for record in KINDS.values())


def kind_of_conn_type(conn_type: str) -> str:
    """The kind of a server from its Airflow connection's type."""
    listed = [record.kind for record in KINDS.values() if conn_type in record.conn_types]
    return (listed or [record.kind for record in KINDS.values() if record.any_conn_type])[0]


def asset_of(target):
    """The Asset a commit emits for a DAG author's target."""
    return KINDS[target.kind].asset(target.name, target.conn_id)
