"""The Iceberg participant: Parquet files staged beside the table, one snapshot commits them.

- stage (driver): load the table (or create it from the target's columns), check the job's
  frame has its columns, delete what an earlier attempt of the load staged.
- write (executors, IcebergWriter): each Spark task attempt writes its partition's rows as
  Parquet files of the table's schema (one per value of its identity partition columns)
  into the load's staging directory, `<table location>/data/twophase/<load id>/`. No
  snapshot references them: readers see nothing. Executors need pyarrow only.
- prepare (driver): keep the successful attempts' files (delete the others), check each
  is there with its size and that their rows are Spark's count; the vote lists them.
- commit: one catalog commit (a metadata swap: readers see all of the load or none of it)
  adding exactly those files, preceded in mode replace by the delete of the interval's
  rows; every snapshot's summary carries `twophase.load_id`. Idempotent by that id: the
  snapshot log is read before committing and after any error, and the files of a commit
  whose outcome is unknown are never deleted (the known corruption of other writers).
  It can fail for good after a yes vote (table dropped, files deleted, schema changed), so
  it commits before the participants that cannot.
- abort: write `_ABORTED` in the staging directory (a later commit refuses) and delete the
  staged files; refused once a snapshot carries the load.
- sweep: staging directories of loads unknown or ABORTED, in every table of the catalog.

Each table is a participant of its own (a catalog commits one table at a time).

Files:
- target.py: IcebergTarget, what a load says about a table (plain data, no client).
- catalog.py: the driver's side of the catalog: connection properties, tables (and their
  creation), snapshots of a load, staging directories and files (pyarrow filesystems).
- writer.py: IcebergWriter, the executor side (Parquet files of one Spark partition).
- participant.py: IcebergParticipant, the driver side.

The names below are imported from their modules on first use, so that importing the
target (twophase.spec does) loads no pyiceberg.
"""

from __future__ import annotations

from ...lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "target": ("COLUMN_TYPES", "IcebergTarget", "NAME_PREFIX"),
    "catalog": ("IcebergConfigError", "LOAD_PROPERTY", "catalog_of", "committed_by", "describe", "staging_dir"),
    "writer": ("IcebergWriter",),
    "participant": ("ABORTED_MARK", "NAME", "IcebergParticipant"),
})
