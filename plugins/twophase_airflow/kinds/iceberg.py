"""Iceberg tables in Airflow: the IcebergTable a DAG author lists, its Asset, and the catalog
of an Airflow connection of type iceberg (its extra holds pyiceberg's catalog properties)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from urllib.parse import urlsplit

from twophase.participants.iceberg import IcebergTarget
from twophase.participants.iceberg.target import NAME_PREFIX
from twophase.spec import SpecError

from .shared import AirflowKind, check_conn_id, interval_value, named_asset

DEFAULT_CONN_ID = "twophase_iceberg"
# Keys of a catalog's properties whose values are secrets (masked in task logs).
_SECRET_KEYS = ("password", "secret", "credential", "token", "key")


@dataclass(frozen=True)
class IcebergTable:
    """An Apache Iceberg table (`namespace.table`) of the catalog of `conn_id` (an Airflow
    connection whose extra holds pyiceberg's catalog properties: type, uri, warehouse...).

    - interval_column: as Table's: in mode "replace" the rows of the run's interval are
      swapped for the load's in the same catalog commit ('' = never replaced into);
    - columns: {name: Iceberg type} ("string", "date", "long", "decimal(12, 2)"...): the
      first load creates the table with them (and a load_id column) when it is missing;
      without them the table must exist;
    - partition_by: identity partition columns of a table the load creates;
    - frame: which of the job's frames it loads ('' = the main one);
    - schema: {column: Spark type} of its frame (twophase.schema; LoadConfig(schema=...)
      gives it to every target of the main frame): the table is created from it (unless
      `columns` are given), the frame must match it, and a table that lacks one of its
      columns is refused, naming it.
    """

    name: str
    interval_column: str = "day"
    conn_id: str = DEFAULT_CONN_ID
    frame: str = ""
    columns: dict | None = None
    partition_by: tuple = ()
    schema: dict | None = None
    kind = "iceberg"

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise SpecError(f"IcebergTable name must be a string like 'namespace.table', got {self.name!r}")
        check_conn_id(self)
        try:
            self.core("replace" if self.interval_column else "append", (date(2026, 1, 1), date(2026, 1, 2)), "")
        except (SpecError, TypeError, AttributeError) as exc:
            raise SpecError(f"IcebergTable {self.name}: {exc}") from None

    @property
    def load_name(self) -> str:
        """Its name in the load (votes, counts, audit rules): iceberg:namespace.table."""
        return NAME_PREFIX + self.name

    def core(self, mode: str, interval: tuple, connection: str) -> IcebergTarget:
        replace_where = ({self.interval_column: interval_value(interval)}
                         if mode == "replace" and self.interval_column else {})
        return IcebergTarget(self.name, "replace" if replace_where else "append", replace_where, connection,
                             self.frame, dict(self.columns or {}), tuple(self.partition_by), self.schema or {})


def iceberg_asset(table: str, iceberg_conn_id: str = DEFAULT_CONN_ID):
    """The Asset a load's commit emits for `table` of connection `iceberg_conn_id`."""
    if not isinstance(table, str):
        raise SpecError(f"iceberg_asset: table must be a string like 'namespace.table', got {table!r}")
    return named_asset("iceberg_asset", "iceberg", table, iceberg_conn_id, IcebergTarget, DEFAULT_CONN_ID)


def address(conn, conn_id: str) -> str:
    """The catalog's properties as the core's address (JSON), with every secret in them (a
    password in the uri, credentials, tokens) masked in task logs."""
    from airflow.sdk.log import mask_secret

    props = conn.extra_dejson
    if not isinstance(props, dict) or not props:
        raise SpecError(f"Airflow connection {conn_id!r} has no Iceberg catalog properties in its extra "
                        '(e.g. {"type": "sql", "uri": ..., "warehouse": ...})')
    for secret in _secrets_of(props):
        mask_secret(secret)
    return json.dumps(props)


def secrets(catalog: str) -> set[str]:
    return _secrets_of(json.loads(catalog))


def _secrets_of(props: dict) -> set[str]:
    """Values of secret-looking keys, and the password in the uri."""
    found = {str(value) for key, value in props.items() if any(word in key.lower() for word in _SECRET_KEYS) and value}
    password = urlsplit(str(props.get("uri", ""))).password
    return found | {password} if password else found


ICEBERG = AirflowKind("iceberg", IcebergTable, DEFAULT_CONN_ID, ("iceberg",), address, secrets, iceberg_asset)
