"""The Postgres participant: COPY into staging, promote inside a prepared transaction.

- stage (driver): check the server can prepare transactions, discard an earlier attempt
  of this load, create an unlogged staging table shaped like the target.
- write (executors, PostgresWriter): each Spark partition COPYs its rows into staging in
  one transaction that first deletes rows an earlier attempt of the same partition left.
- prepare (driver): in one transaction, delete the replaced rows (mode replace), insert
  staging into the target with the load id, write the commit marker, and end with
  PREPARE TRANSACTION. Nothing is visible yet; everything survives a crash.
- commit: COMMIT PREPARED (constant time), then clean_up drops staging. abort: ROLLBACK
  PREPARED and drop staging.
Both are idempotent: the marker row, committed or rolled back with the load, tells a
retry what already happened.
- as the load's last resource (a server with max_prepared_transactions = 0, or tables with
  prepared=False; docs/adr/0011): ready only checks staging; commit, in the vote, inserts the
  load's COMMIT marker into twophase.decisions, promotes every table and commits, in one
  local transaction, which is the load's decision; abort first claims the ABORT marker.

Files:
- target.py: PostgresTarget, what a load says about a table (plain data, no driver).
- server.py: the server's side: connections, prepared transactions, staging tables, the
  commit markers table.
- writer.py: PostgresWriter, the executor side (COPY of one Spark partition into staging).
- participant.py: PostgresParticipant, the driver side (stage, prepare, commit, abort,
  sweep).

The names below are imported from their modules on first use, so that importing the
target (twophase.spec does) loads neither psycopg2 nor pyarrow.
"""

from __future__ import annotations

from ...lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "target": ("PostgresTarget",),
    "server": ("DECISIONS", "MARKERS", "PART_COLUMN", "PostgresConfigError", "drop_staging_table", "is_prepared",
               "prepared_gids", "rollback_gid", "staging_tables"),
    "writer": ("PostgresWriter", "StagingRefused"),
    "participant": ("NAME", "PostgresParticipant"),
})
