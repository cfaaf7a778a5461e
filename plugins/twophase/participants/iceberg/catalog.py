"""The driver's side of Iceberg: the catalog, the table, its snapshots, the staged files.

A catalog connection's address is a JSON object of pyiceberg catalog properties, e.g.
{"name": "lake", "type": "sql", "uri": "postgresql+psycopg2://...", "warehouse":
"file:///..."} or {"type": "rest", "uri": "https://...", "credential": ...}: any catalog
pyiceberg supports. It may hold a password: never log it (`describe` names the catalog
without it).

Staged files live under the table's location, in `data/twophase/<load id>/`: no snapshot
references them until the load's commit adds exactly the files its vote lists.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from ... import ids
from ...errors import SpecError, Terminal
from ...spark.storage import filesystem
from .target import IcebergTarget

LOAD_PROPERTY = "twophase.load_id"  # in the summary of each snapshot a load commits
ATTEMPT_PROPERTY = "twophase.attempt"  # ... and the prepare attempt whose files it added
STAGING_DIR = "data/twophase"


class IcebergConfigError(Terminal):
    """The catalog or a table cannot take the load as configured; nothing was written."""


def properties(address: str) -> dict:
    try:
        props = json.loads(address)
    except ValueError:
        props = None
    if not isinstance(props, dict):
        raise SpecError("an Iceberg connection's address must be a JSON object of pyiceberg catalog properties "
                        '({"type": "sql", "uri": ..., "warehouse": ...})')
    return {str(k): str(v) for k, v in props.items()}


def describe(address: str) -> str:
    """The catalog, named without any secret: its name and type, and the host of its uri."""
    props = properties(address)
    uri = urlsplit(props.get("uri", ""))
    where = f" at {uri.hostname}{':' + str(uri.port) if uri.port else ''}" if uri.hostname else ""
    return f"Iceberg catalog {props.get('name', 'twophase')!r} ({props.get('type', 'rest')}{where})"


def catalog_of(address: str):
    from pyiceberg.catalog import load_catalog

    props = properties(address)
    return load_catalog(props.pop("name", "twophase"), **props)


def _iceberg_type(type_: str):
    from pyiceberg import types as T

    decimal = re.match(r"^decimal\((\d{1,2}),\s*(\d{1,2})\)$", type_)
    if decimal:
        return T.DecimalType(int(decimal[1]), int(decimal[2]))
    return {"boolean": T.BooleanType, "int": T.IntegerType, "long": T.LongType, "float": T.FloatType,
            "double": T.DoubleType, "date": T.DateType, "time": T.TimeType, "timestamp": T.TimestampType,
            "timestamptz": T.TimestamptzType, "string": T.StringType, "uuid": T.UUIDType,
            "binary": T.BinaryType}[type_]()


def load_table(catalog, target: IcebergTarget):
    """The target's table; created (with its namespace) from the target's columns when
    missing and described, else IcebergConfigError naming what to do."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import NestedField, StringType

    try:
        return catalog.load_table(target.table)
    except NoSuchTableError:
        if not target.columns:
            raise IcebergConfigError(f"iceberg table {target.table} does not exist: create it first (with a load_id "
                                     "string column), or give the target its columns") from None
    fields = [NestedField(i, name, _iceberg_type(type_), required=False)
              for i, (name, type_) in enumerate(target.columns.items(), start=1)]
    fields.append(NestedField(len(fields) + 1, "load_id", StringType(), required=False))
    schema = Schema(*fields)
    spec = PartitionSpec(*[PartitionField(source_id=schema.find_field(c).field_id, field_id=1000 + i,
                                          transform=IdentityTransform(), name=c)
                           for i, c in enumerate(target.partition_by)])
    # Loads of two pipelines can create one namespace, or one table, at once: the catalog
    # checks, then inserts, and the second insert fails (a SQL catalog's unique violation).
    # What the other made is as good: only when it is not there is the error the load's.
    try:
        catalog.create_namespace_if_not_exists(target.namespace)
    except Exception:
        if not catalog.namespace_exists(target.namespace):
            raise
    try:
        return catalog.create_table_if_not_exists(target.table, schema=schema, partition_spec=spec)
    except Exception:
        if not catalog.table_exists(target.table):
            raise
        return catalog.load_table(target.table)


def partition_columns(table) -> list[str]:
    """The source columns of the table's identity partitions; IcebergConfigError for any
    other transform (a staged file must hold the rows of one partition, and only identity
    partitions are computed by the writers)."""
    from pyiceberg.transforms import IdentityTransform

    schema, columns = table.schema(), []
    for field in table.spec().fields:
        if not isinstance(field.transform, IdentityTransform):
            raise IcebergConfigError(f"iceberg table {table.name()} is partitioned by {field.transform}"
                                     f"({schema.find_column_name(field.source_id)}): this participant writes "
                                     "identity partitions only")
        columns.append(schema.find_column_name(field.source_id))
    return columns


def arrow_schema(table) -> pa.Schema:
    """The table's schema as the staged Parquet files hold it (with Iceberg's field ids)."""
    return table.schema().as_arrow()


def committed_by(table, load_id: str) -> list:
    """The table's snapshots that the load committed (after a refresh): none, or the
    load's one commit (an append, preceded by a delete in mode replace)."""
    table.refresh()
    return [s for s in table.snapshots() if s.summary is not None
            and s.summary.additional_properties.get(LOAD_PROPERTY) == load_id]


def staging_dir(table, load_id: str, attempt: int = 1) -> str:
    """The directory a prepare attempt of the load stages in: `<load id>` for the first
    (as before attempts were fenced), `<load id>+a<n>` for attempt n."""
    tag = ids.attempt_tag(attempt)
    return f"{table.location().rstrip('/')}/{STAGING_DIR}/{load_id}" + (f"+{tag}" if tag else "")


def uri_of(base_uri: str, path: str) -> str:
    """The URI of `path` (in the filesystem of `base_uri`)."""
    scheme = urlsplit(base_uri)
    if scheme.scheme in ("", "file"):
        return "file://" + path
    return f"{scheme.scheme}://{path}"


def staged_files(directory: str) -> dict[str, int]:
    """{file URI: bytes} of the files in a staging directory (none when it is missing)."""
    fs, path = filesystem(directory)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
    return {uri_of(directory, i.path): i.size for i in infos if i.type == pafs.FileType.File}


def delete_files(uris: list[str]) -> None:
    for uri in uris:
        fs, path = filesystem(uri)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass


def delete_dir(directory: str) -> list[str]:
    """Delete a staging directory with its files; the names of the files it held."""
    files = staged_files(directory)
    fs, path = filesystem(directory)
    try:
        fs.delete_dir(path)
    except FileNotFoundError:
        pass
    return [uri.rsplit("/", 1)[-1] for uri in files]


def staging_dirs(table) -> dict[str, list[int]]:
    """{load id: its prepare attempts} that have a staging directory in the table's location."""
    fs, path = filesystem(f"{table.location().rstrip('/')}/{STAGING_DIR}")
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
    found: dict[str, list[int]] = {}
    for info in infos:
        if info.type == pafs.FileType.Directory:
            load_id, _, tag = info.base_name.partition("+")
            found.setdefault(load_id, []).append(int(tag[1:]) if tag[1:].isdigit() else 1)
    return found


def committed_attempt(snapshots: list) -> int:
    """The prepare attempt whose files the load's snapshots added (1 before attempts were
    recorded in them)."""
    tags = [s.summary.additional_properties.get(ATTEMPT_PROPERTY) for s in snapshots]
    return next((int(t) for t in tags if t and t.isdigit()), 1)
