"""IcebergParticipant: the driver side (stage, prepare, ready, commit, abort, sweep); the
package's docstring tells the protocol."""

from __future__ import annotations

import time

from ... import failpoints, ids
from ...errors import ServerUnreachable, SpecError, Terminal, one_line, root_cause
from ...protocol.outcome import Kind, Outcome
from ...protocol.votes import Vote
from ..contract import Participant, Staging, Swept
from .catalog import (ATTEMPT_PROPERTY, LOAD_PROPERTY, IcebergConfigError, arrow_schema, catalog_of,
                      committed_attempt, committed_by, delete_dir, delete_files, describe, load_table,
                      partition_columns, staged_files, staging_dir, staging_dirs, filesystem)
from .target import IcebergTarget
from .writer import IcebergWriter

NAME = "iceberg"
ABORTED_MARK = "_ABORTED"     # written in the staging directory by abort: a later commit refuses
CONFLICT_RETRIES = 5          # commits retried at once when another writer committed in between


class IcebergParticipant(Participant):
    """One Iceberg table: its load commits as one snapshot (with a delete before it in mode
    replace, in the same catalog commit) whose summary carries the load id."""

    kind = NAME
    executor_packages = ("pyarrow", "pyarrow.parquet")  # what writer.py imports on executors (spark/executors.py)
    # The table can be dropped, or its schema changed, after a yes vote: the commit can
    # fail for good, so it goes first (docs/adr/0001-commit-order.md).
    commit_may_fail = True
    # It fails for good only when someone dropped the table, deleted its staged files or
    # changed its schema after the vote: after a Kafka copy, which can time out by itself.
    commit_risk = 1

    def __init__(self, catalog: str, targets, load_id: str, name: str = NAME, attempt: int = 1):
        self.catalog_address = self.endpoint = catalog
        self.load_id, self.name, self.attempt = load_id, name, attempt
        tables = [targets] if isinstance(targets, IcebergTarget) else list(targets)
        if len(tables) != 1:
            raise SpecError(f"an Iceberg participant commits one table, not {len(tables)}")
        self.target: IcebergTarget = tables[0]
        self.targets = (self.target.name,)
        self._catalog = None

    @classmethod
    def group_of(cls, target) -> str:
        return target.table  # a catalog commits one table at a time: one participant each

    @property
    def catalog(self):
        if self._catalog is None:
            self._catalog = catalog_of(self.catalog_address)
        return self._catalog

    def _table(self):
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.target.table)
        except NoSuchTableError:
            return None

    # -- stage --------------------------------------------------------------------------------
    def stage(self, frames) -> Staging:
        """Check the frame has the table's columns (creating the table first when the
        target describes it), discard what an earlier attempt of the load staged, and
        return the writer. Fails with SpecError or IcebergConfigError, nothing written."""
        target = self.target
        if target.frame not in frames:
            raise SpecError(f"iceberg table {target.table} loads the job's frame {target.frame!r}, which the job did "
                            f"not return (it returned {sorted(frames)})")
        table = load_table(self.catalog, target)
        schema = arrow_schema(table)
        if "load_id" not in schema.names:
            raise SpecError(f"iceberg table {target.table} has no load_id column: add a load_id string column")
        lacks = [c for c in target.frame_schema if c not in schema.names]
        if lacks:
            raise IcebergConfigError(f"iceberg table {target.table} lacks column(s) {lacks} of the load's schema: add "
                                     "them to the table before the load (its schema's add_column), or leave them out "
                                     "of the schema and the job's frame. Nothing was written.")
        missing = [n for n in schema.names if n != "load_id" and n not in frames[target.frame]]
        if missing:
            raise SpecError(f"the DataFrame lacks columns the targets need: {missing} of iceberg table "
                            f"{target.table}; it has {frames[target.frame]}")
        for column in target.replace_where:
            if column not in schema.names:
                raise SpecError(f"replace_where column {column!r} is not a column of iceberg table {target.table}")
        partitions = partition_columns(table)
        if committed_by(table, self.load_id):
            raise Terminal(f"load {self.load_id} is already committed to iceberg table {target.table}")
        directory = staging_dir(table, self.load_id, self.attempt)
        self._delete_earlier(table)  # a retried prepare: what earlier attempts (perhaps a zombie) staged
        delete_dir(directory)
        writer = IcebergWriter(directory, schema.serialize().to_pybytes(), partitions, self.load_id, target.name)
        return Staging({target.name: writer}, {"directory": directory}, {target.name: target.frame})

    # -- prepare ------------------------------------------------------------------------------
    def prepare(self, marks: dict, reports, expected) -> Vote:
        """Keep the successful attempts' files (delete every other file of the staging
        directory: failed and speculative attempts), check each is there with its size,
        and vote with their list. Votes no when the rows differ from Spark's count."""
        name, directory = self.target.name, marks["directory"]
        files = [f for report in reports.get(name, []) for f in report["files"]]
        on_disk = staged_files(directory)
        delete_files([uri for uri in on_disk if uri not in {f["path"] for f in files}])
        rows = sum(f["rows"] for f in files)
        problems = [f"staged file {f['path']} is missing or has {on_disk.get(f['path'])} bytes, not {f['bytes']}"
                    for f in files if on_disk.get(f["path"]) != f["bytes"]]
        if rows != expected.get(name):
            problems.append(f"staged {rows} rows for {name} but Spark computed {expected.get(name)}")
        failpoints.hit("iceberg.prepared")
        committable = {"table": self.target.table, "directory": directory, "files": [f["path"] for f in files],
                       "rows": rows}
        summary = (f"{rows} rows in {len(files)} Parquet file{'' if len(files) == 1 else 's'} staged for {name} "
                   f"in {directory}")
        return Vote(self.name, not problems, rows, committable, "; ".join(problems), {name: rows}, summary)

    def ready(self, vote: Vote) -> Vote:
        """Nothing to take before the commit (the catalog commit is optimistic): check the
        table still exists and every staged file is still there."""
        table = self._table()
        if table is None:
            return vote.no(f"iceberg table {self.target.table} does not exist (dropped after the vote?)")
        problem = self._files_missing(vote)
        return vote.no(problem) if problem else vote

    def staged_rows(self, vote: Vote, target: str):
        """The staged Parquet files' rows."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ...audit.staged import ArrowRows

        tables = []
        for uri in vote.committable["files"]:
            fs, path = filesystem(uri)
            tables.append(pq.read_table(path, filesystem=fs))
        return ArrowRows(target, pa.concat_tables(tables) if tables else pa.table({}))

    def _files_missing(self, vote: Vote) -> str:
        on_disk = staged_files(vote.committable["directory"])
        if ABORTED_MARK in {uri.rsplit("/", 1)[-1] for uri in on_disk}:
            return f"the load was aborted: its staged files for iceberg table {self.target.table} are never committed"
        missing = [f for f in vote.committable["files"] if f not in on_disk]
        if missing:
            return (f"{len(missing)} of the {len(vote.committable['files'])} staged files of iceberg table "
                    f"{self.target.table} are gone (e.g. {missing[0]}): deleted outside the protocol")
        return ""

    # -- commit -------------------------------------------------------------------------------
    def commit(self, vote: Vote) -> Outcome:
        """One catalog commit: in mode replace the interval's rows deleted, then the staged
        files added, each snapshot's summary carrying the load id.

        Handles: committed now (DONE); a snapshot of the load already there (ALREADY_DONE:
        an earlier attempt, perhaps one whose outcome was unknown); the table dropped, the
        load aborted, staged files gone or not matching the table's schema (FAILED, nothing
        committed); another writer committed in between (retried at once, then
        RETRY_LATER); any other error (the outcome is unknown: the snapshot log is read
        again, and without the load's snapshot RETRY_LATER; the staged files are never
        deleted here, since the commit may have landed)."""
        table = self._table()
        if table is None:
            return Outcome(self.name, Kind.FAILED, f"iceberg table {self.target.table} does not exist (dropped after "
                           "the vote?): nothing was committed")
        for _ in range(CONFLICT_RETRIES):
            done = committed_by(table, self.load_id)
            if done:
                return self._committed(Kind.ALREADY_DONE, vote, done)
            problem = self._files_missing(vote)
            if problem:
                return Outcome(self.name, Kind.FAILED, problem)
            try:
                self._commit(table, vote)
            except Exception as exc:  # noqa: BLE001 - sorted below; the outcome may be unknown
                from pyiceberg.exceptions import CommitFailedException

                if isinstance(exc, CommitFailedException):  # another writer went first: nothing of ours landed
                    time.sleep(0.2)
                    table = self._table() or table
                    continue
                done = self._committed_after(table, exc)
                if done:
                    return self._committed(Kind.DONE, vote, done)
                if isinstance(exc, ValueError):  # pyiceberg refused the files before committing
                    return Outcome(self.name, Kind.FAILED, one_line(
                        f"iceberg table {self.target.table} refused the staged files: {root_cause(exc)}"))
                return Outcome(self.name, Kind.RETRY_LATER, one_line(
                    f"the commit to iceberg table {self.target.table} failed, its outcome unknown; the staged files "
                    f"are kept and a retry reads the table's snapshots first: {root_cause(exc)}"))
            failpoints.hit("iceberg.committed")
            return self._committed(Kind.DONE, vote, committed_by(table, self.load_id))
        return Outcome(self.name, Kind.RETRY_LATER, f"iceberg table {self.target.table}: other writers committed "
                       f"{CONFLICT_RETRIES} times in a row; retry")

    def _commit(self, table, vote: Vote) -> None:
        from pyiceberg.expressions import AlwaysTrue, And, EqualTo

        properties = {LOAD_PROPERTY: self.load_id, ATTEMPT_PROPERTY: str(self.attempt)}
        with _without_retries(table).transaction() as tx:
            if self.target.mode == "replace":
                where = AlwaysTrue()
                for column, value in self.target.replace_where.items():
                    where = And(where, EqualTo(column, value))
                tx.delete(delete_filter=where, snapshot_properties=properties)
            if vote.committable["files"]:
                tx.add_files(vote.committable["files"], snapshot_properties=properties, check_duplicate_files=True)

    def _committed_after(self, table, exc: Exception) -> list:
        """After an error of the commit: the load's snapshots if it landed anyway."""
        try:
            return committed_by(table, self.load_id)
        except Exception:  # noqa: BLE001 - the catalog is not answering: unknown, retry
            return []

    def _committed(self, kind: Kind, vote: Vote, snapshots: list) -> Outcome:
        """A commit's outcome: its counts, and what readers see, the records the load's
        snapshots added (their summaries, as the table's metadata says)."""
        appended = [s for s in snapshots if s.summary.operation.value == "append"]
        deleted = sum(int(s.summary.additional_properties.get("deleted-records", 0)) for s in snapshots)
        added = sum(int(s.summary.additional_properties.get("added-records", 0)) for s in snapshots)
        counts = {"rows": vote.committable["rows"], "files": len(vote.committable["files"])}
        if appended:
            counts["snapshot"] = appended[-1].snapshot_id
        if deleted:
            counts["deleted"] = deleted
        return Outcome(self.name, kind, counts=counts, visible={self.target.name: added})

    def clean_up(self, vote: Vote) -> str:
        """After the commit: delete the staging directory's files the snapshot does not
        reference (a stray attempt's, written after prepare). Never the committed ones."""
        try:
            kept = set(vote.committable["files"])
            stray = [uri for uri in staged_files(vote.committable["directory"]) if uri not in kept]
            delete_files(stray)
            table = self._table()
            if table is not None:
                self._delete_earlier(table)
        except Exception as exc:  # noqa: BLE001 - the load is committed; the sweep may retry
            return one_line(f"stray staged files of iceberg table {self.target.table} left: {root_cause(exc)}")
        return ""

    # -- abort --------------------------------------------------------------------------------
    def abort(self, vote: Vote | None = None) -> Outcome:
        """Mark the staging directory aborted (a later commit refuses) and delete its data
        files. FAILED when a snapshot of the load is in the table: committed, it cannot be
        undone by deleting files (that would corrupt the table)."""
        table = self._table()
        if table is None:
            directory = vote.committable["directory"] if vote else None
        else:
            if committed_by(table, self.load_id):
                return Outcome(self.name, Kind.FAILED, f"the load is already committed to iceberg table "
                               f"{self.target.table}; it cannot be rolled back")
            directory = staging_dir(table, self.load_id, self.attempt)
            self._delete_earlier(table)
        if directory is None:  # no table, no vote: nothing was ever staged
            return Outcome(self.name, Kind.ALREADY_DONE, counts={"staged_files_deleted": 0})
        on_disk = staged_files(directory)
        marked = any(uri.rsplit("/", 1)[-1] == ABORTED_MARK for uri in on_disk)
        data = [uri for uri in on_disk if uri.rsplit("/", 1)[-1] != ABORTED_MARK]
        if not marked:
            self._mark_aborted(directory)
        delete_files(data)
        counts = {"staged_files_deleted": len(data)}
        if vote is not None:
            counts["staged_rows_discarded"] = vote.count
        return Outcome(self.name, Kind.ALREADY_DONE if marked and not data else Kind.DONE, counts=counts)

    def discard(self) -> str:
        """A superseded attempt: delete its own staging directory (no other attempt's; a
        commit never adds this attempt's files: the load's vote names another's)."""
        try:
            table = self._table()
            if table is not None:
                delete_dir(staging_dir(table, self.load_id, self.attempt))
        except Exception as exc:  # noqa: BLE001 - never raises: the latest attempt or the sweep deletes it
            return one_line(f"staged files of attempt {self.attempt} of iceberg table {self.target.table} left for "
                            f"the latest attempt or the sweep: {root_cause(exc)}")
        return ""

    def _delete_earlier(self, table) -> None:
        """Delete the staging directories of the load's earlier prepare attempts: stray by now."""
        for attempt in range(1, self.attempt):
            delete_dir(staging_dir(table, self.load_id, attempt))

    @staticmethod
    def _mark_aborted(directory: str) -> None:
        from .catalog import filesystem

        fs, path = filesystem(directory)
        fs.create_dir(path, recursive=True)
        with fs.open_output_stream(f"{path.rstrip('/')}/{ABORTED_MARK}") as out:
            out.write(b"aborted\n")

    def unreachable(self, exc: BaseException) -> ServerUnreachable | None:
        """The catalog's server did not answer (a SQL catalog's database, a REST catalog)."""
        names = {type(e).__name__ for e in _chain(exc)}
        if names & {"OperationalError", "ConnectionError", "ConnectTimeout", "ServiceUnavailableError"}:
            return ServerUnreachable(one_line(f"{describe(self.catalog_address)} is unreachable: {root_cause(exc)}; "
                                              "start it (or fix the connection) and retry"))
        return None

    # -- readers and recovery -------------------------------------------------------------------
    def visible(self, load_ids: list[str]) -> dict[str, dict[str, int]]:
        """Rows of each load in the table's current snapshot, read as any reader scans it."""
        from pyiceberg.expressions import In

        found: dict[str, int] = {}
        table = self._table()
        if table is not None and load_ids:
            rows = table.scan(row_filter=In("load_id", load_ids), selected_fields=("load_id",)).to_arrow()
            for lid in rows.column("load_id").to_pylist():
                found[lid] = found.get(lid, 0) + 1
        return {lid: {self.target.name: found.get(lid, 0)} for lid in load_ids}

    @classmethod
    def sweep(cls, catalog: str, state_of, pipeline: str | None = None) -> list[Swept]:
        """Every table of the catalog: staging directories of loads that are unknown or
        ABORTED are deleted, unless a snapshot of the table carries the load: then only
        the directories of the load's other prepare attempts (superseded ones) are, never
        the committed attempt's (its files are the table's). Only `pipeline`'s loads, when
        given."""
        from pyiceberg.exceptions import NoSuchTableError

        swept: list[Swept] = []
        cat = catalog_of(catalog)
        for namespace in cat.list_namespaces():
            for identifier in cat.list_tables(namespace):
                try:
                    _sweep_table(cat, identifier, state_of, pipeline, swept)
                except (NoSuchTableError, FileNotFoundError):
                    # Dropped since it was listed (a purge deletes the catalog's row, then
                    # the files: one read between them finds no metadata): nothing (more)
                    # of it to sweep. A table still listed whose files are missing is loud.
                    if tuple(identifier) in map(tuple, cat.list_tables(namespace)):
                        raise
        return swept


def _sweep_table(cat, identifier, state_of, pipeline: str | None, swept: list[Swept]) -> None:
    """IcebergParticipant.sweep of one table, what it deletes added to `swept`."""
    from ...protocol.states import State

    table = cat.load_table(identifier)
    loads = {lid: attempts for lid, attempts in staging_dirs(table).items() if ids.of_pipeline(lid, pipeline)}
    if not loads:
        return
    states = state_of(set(loads))
    for lid, attempts in loads.items():
        state = states.get(lid)
        snapshots = committed_by(table, lid)
        if snapshots:
            stray = [a for a in attempts if a != committed_attempt(snapshots)]
        else:
            stray = attempts if state in (None, State.ABORTED) else []
        for attempt in stray:
            data = [f for f in delete_dir(staging_dir(table, lid, attempt)) if f != ABORTED_MARK]
            where = f"attempt {attempt} of iceberg table {'.'.join(identifier)}"
            if data:
                swept.append(Swept(lid, "orphan staged files deleted", f"{len(data)} files of {where}; "
                                   f"load {'unknown' if state is None else state}"))
            else:  # what an abort leaves: its mark, the staged files already deleted
                swept.append(Swept(lid, "abort's mark removed", f"{ABORTED_MARK} of {where}, whose "
                                   "staged files the abort deleted"))


def _chain(exc: BaseException):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def _without_retries(table):
    """The table as this commit sees it, with pyiceberg's own commit retries off. Its retry
    after a concurrent commit re-applies the files on top of whatever landed meanwhile,
    which may be this very load committed by another driver (one that stalled past its
    lease): the load would land twice. Without it a concurrent commit raises
    CommitFailedException, and commit() reads the table's snapshots before it tries again.
    Only this in-memory view changes; the table's own properties are never written."""
    from pyiceberg.table import Table

    metadata = table.metadata.model_copy(update={"properties": {**table.metadata.properties,
                                                                 "commit.retry.num-retries": "0"}})
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog)
