"""PostgresParticipant: the driver side (stage, prepare, commit, abort, sweep); the
package's docstring tells the protocol."""

from __future__ import annotations

import json

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from ... import failpoints, ids, privileges
from ...errors import MissingPrivilege, ServerUnreachable, SpecError, one_line
from ...protocol.outcome import Kind, Outcome
from ...protocol.votes import Vote
from ...schema import missing_columns_sql
from ...server_errors import postgres_unreachable, servers
from ..contract import Participant, Staging, Swept
from . import partition
from .server import (DECISIONS, MARKERS, PART_COLUMN, PostgresConfigError, _autocommit, _connect, _exists,
                     _rollback_gid, drop_staging_table, ensure_decisions, ensure_schemas, grants_needed, prepared_gids,
                     rollback_gid, staging_tables)
from .target import PostgresTarget
from .writer import PostgresWriter

NAME = "postgres"
_CANNOT_PREPARE = ("the Postgres server has max_prepared_transactions = 0, so it cannot take part in a two-phase "
                   "commit: set max_prepared_transactions above the number of loads in flight (postgresql.conf) "
                   "and restart it")


class PostgresParticipant(Participant):
    """The load's tables in one Postgres database: one prepared transaction covers them all,
    or, as the load's last resource, one local transaction that also writes the decision."""

    kind = NAME
    executor_packages = ("psycopg2", "pyarrow")  # what writer.py imports on executors (spark/executors.py)
    commit_may_fail = False  # COMMIT PREPARED of a prepared transaction cannot fail for good
    can_commit_last = True

    def __init__(self, dsn: str, targets, load_id: str, name: str = NAME, attempt: int = 1):
        self.dsn = self.endpoint = dsn
        self.load_id, self.name, self.attempt = load_id, name, attempt
        self.tables: list[PostgresTarget] = [targets] if isinstance(targets, PostgresTarget) else list(targets)
        self.targets = tuple(t.table for t in self.tables)
        self.gid = self._gid(attempt)
        self.staging = self._staging(attempt)

    def _gid(self, attempt: int) -> str:
        return ids.pg_gid(self.load_id, self.name, attempt)

    def _staging(self, attempt: int) -> dict[str, str]:
        """{table: its staging table} of a prepare attempt. The first table's staging keeps
        the name it had when a load had one table (and one attempt)."""
        return {t.table: f"{ids.STAGING_SCHEMA}.{ids.staging_table(self.load_id, t.table if i else '', attempt)}"
                for i, t in enumerate(self.tables)}

    def _earlier(self) -> range:
        """The prepare attempts before this one: whatever they left is stray by now."""
        return range(1, self.attempt)

    # -- begin ------------------------------------------------------------------------
    def must_commit_last(self) -> str:
        """Why this database commits as the load's last resource: its tables ask for it
        (prepared=False), or its server cannot prepare (max_prepared_transactions = 0)
        and they do not insist (prepared=True: PostgresConfigError); '' when it prepares."""
        wants = {t.prepared for t in self.tables}
        if len(wants) > 1:
            raise SpecError(f"the tables of {self.name} ({', '.join(self.targets)}) disagree on `prepared`: one "
                            "transaction commits them all, so give them the same value (or leave it None)")
        want = wants.pop()
        if want is False:
            return "its tables ask for it (prepared=False)"
        with _autocommit(self.dsn) as cur:
            cur.execute("show max_prepared_transactions")
            allowed = int(cur.fetchone()[0])
        if allowed:
            return ""
        if want:
            raise PostgresConfigError(_CANNOT_PREPARE + " (its tables ask for prepared=True). Nothing was staged.")
        return "its server has max_prepared_transactions = 0"

    # -- stage ------------------------------------------------------------------------
    def stage(self, frames) -> Staging:
        """Make a fresh staging table per table of this load and attempt. Idempotent;
        discards what earlier attempts prepared and staged.

        Fails with PostgresConfigError, before writing anything, when the server cannot
        prepare transactions (unless this is the load's last resource) or a table is
        missing or has no load_id column, with
        MissingPrivilege when the role lacks a grant (server.grants_needed), and with
        SpecError when a table's frame lacks one of its columns.
        """
        if not self.last_resource and any(t.prepared is False for t in self.tables):
            raise SpecError(f"the tables of {self.name} ask to commit as the load's last resource (prepared=False), "
                            "but the load was begun without asking its servers: pass the connections to "
                            "coordinator.begin. Nothing was written.")
        with _autocommit(self.dsn) as cur:
            if not self.last_resource:
                cur.execute("show max_prepared_transactions")
                if int(cur.fetchone()[0]) == 0:
                    raise PostgresConfigError(_CANNOT_PREPARE + ". Nothing was written.")
            privileges.require(cur, grants_needed(self.tables, self.last_resource))  # before anything is written
            columns, partitions = {}, {}
            for target in self.tables:
                columns[target.table] = table_columns = self.target_columns(cur, target)
                if target.frame not in frames:
                    raise SpecError(f"table {target.table} loads the job's frame {target.frame!r}, which the job "
                                    f"did not return (it returned {sorted(frames)})")
                lacks = missing_columns_sql(target.table, target.frame_schema, table_columns)
                if lacks:
                    raise PostgresConfigError(
                        f"table {target.table} lacks column(s) of the load's schema: add them before the load "
                        f"({'; '.join(lacks)}), or leave them out of the schema and the job's frame. Nothing was "
                        "written.")
                if target.publish == "attach":
                    partitions[target.table] = partition.check(cur, target)
                missing = [c for c in table_columns if c not in frames[target.frame]]
                if missing:
                    raise SpecError(f"the DataFrame lacks columns the targets need: {missing} of table "
                                    f"{target.table}; it has {frames[target.frame]}")
            # A retried prepare: earlier attempts may have prepared already (a crash after
            # PREPARE, or a zombie still running: its staging tables go, so its writes fail).
            self._discard_earlier(cur)
            _rollback_gid(cur, self.gid)
            ensure_schemas(cur, self.last_resource)
            for target in self.tables:
                staging = self.staging[target.table]
                cur.execute(f"drop table if exists {staging}")
                # Unlogged (no WAL: its rows are written again into the table), except where
                # the staging table becomes the table's partition (partition.py).
                attach = target.table in partitions
                cur.execute(sql.SQL("create {} table {} (like {} including defaults)").format(
                    sql.SQL("" if attach else "unlogged"), sql.SQL(staging),
                    sql.Identifier(target.schema, target.relation)))
                cur.execute(f"alter table {staging} drop column load_id, add column {PART_COLUMN} int not null")
                if attach:
                    partition.shape_staging(cur, staging, partitions[target.table])
                cur.execute(f"comment on table {staging} is %s", (self.load_id,))
        writers = {t.table: PostgresWriter(self.dsn, self.staging[t.table], columns[t.table], t.table)
                   for t in self.tables}
        return Staging(writers, frames={t.table: t.frame for t in self.tables})

    @staticmethod
    def target_columns(cur, target: PostgresTarget) -> list[str]:
        """The table's columns in table order, without load_id; checks the table exists."""
        cur.execute("""select column_name from information_schema.columns
                       where table_schema = %s and table_name = %s order by ordinal_position""",
                    (target.schema, target.relation))
        columns = [r[0] for r in cur.fetchall()]
        if not columns:
            raise PostgresConfigError(f"target table {target.table} does not exist: create it first "
                                      "(with a load_id text column)")
        if "load_id" not in columns:
            raise PostgresConfigError(f"target table {target.table} has no load_id column: "
                                      "add `load_id text not null`")
        for column in target.replace_where:
            if column not in columns:
                raise SpecError(f"replace_where column {column!r} is not a column of {target.table}")
        return [c for c in columns if c != "load_id"]

    # -- prepare ------------------------------------------------------------------------
    def prepare(self, marks: dict, reports, expected) -> Vote:
        """Count every table's staged rows and vote, holding nothing: no transaction stays
        open and no lock on a target is taken (the load may wait long before its vote).

        Votes no when a table's staging holds other than the rows Spark staged for it, or
        (publish 'attach') rows that break the table's unique keys, whose indexes are built
        on staging here (partition.index_staging).
        """
        with _autocommit(self.dsn) as cur:
            counts = self._staged_counts(cur)
            broken = [partition.index_staging(cur, t, self.staging[t.table])
                      for t in self.tables if t.publish == "attach"]
        failpoints.hit("pg.prepared")
        first = self.tables[0]
        committable = {"gid": self.gid, "table": first.table, "mode": first.mode,
                       "staged": counts}
        summary = "staged " + ", ".join(f"{n} rows for {t}" for t, n in counts.items())
        wrong = [f"staged {n} rows for {t} but Spark staged {expected.get(t)}"
                 for t, n in counts.items() if n != expected.get(t)] + [why for why in broken if why]
        return Vote(self.name, not wrong, sum(counts.values()), committable, "; ".join(wrong), counts, summary)

    def ready(self, vote: Vote) -> Vote:
        """Promote every table's staging into it inside one prepared transaction: from
        here the load holds locks on its targets until commit or abort.

        Repeatable: a retried vote rolls back what an earlier ready prepared and promotes
        again. Votes no (with nothing left prepared) when a staging table no longer holds
        the rows prepare counted: a Postgres crash restart empties unlogged tables.

        The load's last resource takes nothing: it checks its staging is whole (the commit
        checks it again, in its own transaction).
        """
        if self.last_resource:
            with _autocommit(self.dsn) as cur:
                wrong = self._dropped_staging(cur) or _not_as_voted(self._staged_counts(cur), vote)
            return vote.no(wrong) if wrong else vote
        conn = _connect(self.dsn)
        try:
            with servers(pg_dsn=self.dsn), conn.cursor() as cur:
                # An earlier attempt that prepared after this one staged (a zombie), or an
                # earlier ready of this vote, would hold locks on the rows this replaces.
                for attempt in self._earlier():
                    _rollback_gid(cur, self._gid(attempt))
                _rollback_gid(cur, self.gid)
                gone = self._dropped_staging(cur)
                if gone:
                    return vote.no(gone)
                cur.execute("begin")
                counts, deleted, wrong = self._promote_all(cur, vote)
                if wrong:
                    cur.execute("rollback")
                    return vote.no(wrong)
                cur.execute(f"insert into {MARKERS} (gid, load_id, rows, deleted) values (%s, %s, %s, %s)",
                            (self.gid, self.load_id, sum(counts.values()), sum(deleted.values())))
                # Staging is dropped after COMMIT PREPARED (clean_up), not in here: a dropped
                # table's files are unlinked by the commit, which made COMMIT PREPARED grow
                # with the load (105 ms at 5M rows; 0.2 ms without the drop).
                failpoints.hit("pg.before_prepare")
                cur.execute("prepare transaction %s", (self.gid,))
                failpoints.hit("pg.after_prepare")
        finally:
            conn.close()
        first = self.tables[0]
        committable = {"gid": self.gid, "table": first.table, "mode": first.mode, "deleted": sum(deleted.values()),
                       "tables": {t: {"rows": counts[t], "deleted": deleted[t]} for t in counts}}
        summary = f"prepared transaction {self.gid}: " + ", ".join(
            f"{n} rows for {t}" + (f" replacing {deleted[t]}" if deleted[t] else "") for t, n in counts.items())
        return Vote(self.name, True, sum(counts.values()), committable, "", counts, summary)

    def staged_rows(self, vote: Vote, target: str):
        from .staged import PostgresRows

        return PostgresRows(self.dsn, target, self.staging[target])

    def _staged_counts(self, cur) -> dict[str, int]:
        counts = {}
        for target in self.tables:
            cur.execute(f"select count(*) from {self.staging[target.table]}")
            counts[target.table] = cur.fetchone()[0]
        return counts

    def _dropped_staging(self, cur) -> str:
        """'' when every staging table still exists, else which are gone."""
        gone = []
        for target in self.tables:
            staging = self.staging[target.table]
            cur.execute("select to_regclass(%s)", (staging,))
            if cur.fetchone()[0] is None:
                gone.append(f"staging table {staging} of {target.table} is gone (dropped outside the protocol)")
        return "; ".join(gone)

    def _promote_all(self, cur, vote: Vote) -> tuple[dict[str, int], dict[str, int], str]:
        """Every table's _promote, in the caller's transaction: (rows inserted, rows
        deleted, per table; '', else why they are not the rows the vote counted). The
        promotion's own row count checks staging: no second scan of it."""
        counts, deleted = {}, {}
        for target in self.tables:
            counts[target.table], deleted[target.table] = self._promote(cur, target)
        return counts, deleted, _not_as_voted(counts, vote)

    def _promote(self, cur, target: PostgresTarget) -> tuple[int, int]:
        """Delete the replaced rows (mode replace) and insert the table's staged rows with
        the load id, or attach the staging table as the interval's partition (publish
        'attach', partition.py); (rows inserted, rows deleted)."""
        if target.publish == "attach":
            return partition.publish(cur, target, self.staging[target.table], self.load_id)
        columns = self.target_columns(cur, target)
        deleted = 0
        if target.mode == "replace":
            where = sql.SQL(" and ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in target.replace_where)
            cur.execute(sql.SQL("delete from {} where ").format(sql.Identifier(target.schema, target.relation))
                        + where, list(target.replace_where.values()))
            deleted = cur.rowcount
        column_list = sql.SQL(", ").join(map(sql.Identifier, columns))
        cur.execute(sql.SQL("insert into {} ({}, load_id) select {}, %s from {}").format(
            sql.Identifier(target.schema, target.relation), column_list, column_list,
            sql.SQL(self.staging[target.table])), (self.load_id,))
        return cur.rowcount, deleted

    # -- commit / abort -----------------------------------------------------------------
    def commit(self, vote: Vote | None = None) -> Outcome:
        """COMMIT PREPARED. Handles: done now; done before (marker visible); the prepared
        transaction gone without its marker (rolled back outside the protocol, or by an
        abort: FAILED); a lock or a conflict (RETRY_LATER); server down (ServerUnreachable,
        which outcome_of makes RETRY_LATER). The load's last resource: _commit_last."""
        if self.last_resource:
            return self._commit_last(vote)
        try:
            with _autocommit(self.dsn) as cur:
                try:
                    cur.execute("commit prepared %s", (self.gid,))
                except psycopg2.errors.UndefinedObject:
                    marker = self._marker(cur)
                    if marker is not None:
                        return self._committed(Kind.ALREADY_DONE, vote, marker)
                    return Outcome(self.name, Kind.FAILED, (
                        f"prepared transaction {self.gid} no longer exists and was not committed: it was "
                        "rolled back (by an abort, or outside the protocol: ROLLBACK PREPARED by an operator?), "
                        "so its rows are lost"))
                marker = self._marker(cur)
                self._discard_earlier(cur, drop=False)
            failpoints.hit("pg.committed")
            return self._committed(Kind.DONE, vote, marker)
        except psycopg2.OperationalError as exc:  # a lock or a conflict
            return Outcome(self.name, Kind.RETRY_LATER, one_line(str(exc)))

    def _commit_last(self, vote: Vote) -> Outcome:
        """As the load's last resource, in one local transaction: the COMMIT marker first
        (its key waits for, then refuses, an ABORT claimed meanwhile), then every table's
        promotion, checked against the vote, then COMMIT, which is the load's decision.
        Handles: done now; done before (ALREADY_DONE, from the marker); ABORT claimed first,
        or staging lost (FAILED, nothing visible); a lock or a conflict (RETRY_LATER); the
        server lost, even during COMMIT (ServerUnreachable: the marker tells a retry)."""
        conn = _connect(self.dsn)
        try:
            with servers(pg_dsn=self.dsn), conn.cursor() as cur:
                cur.execute("begin")
                cur.execute(f"insert into {DECISIONS} (load_id, decision) values (%s, 'COMMIT') "
                            "on conflict (load_id) do nothing", (self.load_id,))
                if cur.rowcount == 0:
                    cur.execute("rollback")
                    return self._decided_before(cur)
                counts, deleted, wrong = ({}, {}, gone) if (gone := self._dropped_staging(cur)) else \
                    self._promote_all(cur, vote)
                if wrong:
                    cur.execute("rollback")
                    return Outcome(self.name, Kind.FAILED, wrong)
                tables = {t: {"rows": counts[t], "deleted": deleted[t]} for t in counts}
                cur.execute(f"update {DECISIONS} set tables = %s where load_id = %s",
                            (json.dumps(tables), self.load_id))
                failpoints.hit("pg.last_promoted")
                cur.execute("commit")
            failpoints.hit("pg.last_committed")
        except psycopg2.OperationalError as exc:  # a lock or a conflict (a lost server raised above)
            return Outcome(self.name, Kind.RETRY_LATER, one_line(str(exc)))
        finally:
            conn.close()
        return self._last_committed(Kind.DONE, tables)

    def _decided_before(self, cur) -> Outcome:
        """A last resource's commit that found the load's marker written: ALREADY_DONE when
        it says COMMIT, else FAILED."""
        cur.execute(f"select decision, tables from {DECISIONS} where load_id = %s", (self.load_id,))
        decision, tables = cur.fetchone()
        if decision == "COMMIT":
            return self._last_committed(Kind.ALREADY_DONE, tables)
        return Outcome(self.name, Kind.FAILED, f"load {self.load_id} was decided ABORT in {self.name} (its marker in "
                       f"{DECISIONS}) before this commit; it cannot be committed")

    def _last_committed(self, kind: Kind, tables: dict) -> Outcome:
        """A last resource's commit outcome: the rows it checked and made visible, per
        table, as its marker keeps them."""
        counts = {what: sum(t[what] for t in tables.values()) for what in ("rows", "deleted")}
        return Outcome(self.name, kind, counts=counts, visible={t: r["rows"] for t, r in tables.items()})

    def decided(self) -> str | None:
        with _autocommit(self.dsn) as cur:
            if not _exists(cur, DECISIONS):
                return None
            cur.execute(f"select decision from {DECISIONS} where load_id = %s", (self.load_id,))
            row = cur.fetchone()
        return row[0] if row else None

    def claim_abort(self) -> str:
        with _autocommit(self.dsn) as cur:
            return self._claim_abort(cur)

    def _claim_abort(self, cur) -> str:
        """The ABORT marker, unless COMMIT is there: an insert that waits on the key for a
        commit still running, then finds its marker or writes its own."""
        ensure_decisions(cur)
        cur.execute(f"insert into {DECISIONS} (load_id, decision) values (%s, 'ABORT') "
                    "on conflict (load_id) do nothing", (self.load_id,))
        if cur.rowcount:
            return "ABORT"
        cur.execute(f"select decision from {DECISIONS} where load_id = %s", (self.load_id,))
        return cur.fetchone()[0]

    def clean_up(self, vote: Vote | None = None) -> str:
        """After the commit: drop the staging tables. '' when done, else why one was left
        (recovery's orphan sweep drops it later); never raises, the load is committed."""
        left = []
        for staging in [s for attempt in range(1, self.attempt + 1) for s in self._staging(attempt).values()]:
            try:
                drop_staging_table(self.dsn, staging.split(".", 1)[1])
            except (psycopg2.Error, ServerUnreachable) as exc:
                left.append(one_line(f"staging table {staging} left for recovery: {exc}"))
        return "; ".join(left)

    def abort(self, vote: Vote | None = None) -> Outcome:
        """ROLLBACK PREPARED and drop staging. Handles: prepared (rolled back now); never
        prepared or rolled back before (ALREADY_DONE, staging dropped if left); committed
        already (FAILED: cannot be undone); a lock (RETRY_LATER). The load's last resource
        first claims its ABORT marker (FAILED when it committed).
        `vote`, when the load got that far, gives the count of prepared rows discarded."""
        try:
            with _autocommit(self.dsn) as cur:
                if self.last_resource and self._claim_abort(cur) == "COMMIT":
                    return Outcome(self.name, Kind.FAILED, f"load {self.load_id} is already committed in {self.name}, "
                                   "its last resource; it cannot be rolled back")
                if self._marker(cur) is not None:
                    return Outcome(self.name, Kind.FAILED, f"{self.gid} is already committed; it cannot be rolled back")
                self._discard_earlier(cur)
                discarded = _rollback_gid(cur, self.gid)
                staged = [n for n in (self._drop_staging(cur, s) for s in self.staging.values()) if n is not None]
        except psycopg2.OperationalError as exc:  # a lock or a conflict
            return Outcome(self.name, Kind.RETRY_LATER, one_line(str(exc)))
        counts = {**({} if self.last_resource else {"prepared_transaction": "rolled back" if discarded else "none"}),
                  "staged_rows_dropped": sum(staged)}
        if discarded and vote is not None:
            counts["prepared_rows_discarded"] = vote.count
        done = discarded or bool(staged)
        return Outcome(self.name, Kind.DONE if done else Kind.ALREADY_DONE, counts=counts)

    def discard(self) -> str:
        """A superseded attempt: roll back its own prepared transaction and drop its own
        staging tables; the load's, another attempt's, stay."""
        try:
            with _autocommit(self.dsn) as cur:
                _rollback_gid(cur, self.gid)
                for staging in self.staging.values():
                    self._drop_staging(cur, staging)
        except (psycopg2.Error, ServerUnreachable) as exc:
            return one_line(f"prepared transaction {self.gid} or staging of attempt {self.attempt} left for the "
                            f"latest attempt or recovery: {exc}")
        return ""

    def _discard_earlier(self, cur, drop: bool = True) -> None:
        """Roll back what earlier prepare attempts prepared and (with `drop`) drop their
        staging tables: a stray attempt's work, never the load's."""
        for attempt in self._earlier():
            _rollback_gid(cur, self._gid(attempt))
            if drop:
                for staging in self._staging(attempt).values():
                    # A zombie's executors may still COPY into it: never wait on them
                    # for long; what is left, clean_up, abort or the sweep drop later.
                    cur.execute("set lock_timeout = '5s'")
                    try:
                        self._drop_staging(cur, staging)
                    except psycopg2.errors.LockNotAvailable:
                        pass
                    finally:
                        cur.execute("reset lock_timeout")

    def unreachable(self, exc: BaseException) -> ServerUnreachable | None:
        return postgres_unreachable(self.dsn, exc)

    # -- readers and recovery -------------------------------------------------------------
    def visible(self, load_ids: list[str]) -> dict[str, dict[str, int]]:
        """Rows of each load in each table, as any reader (read committed) counts them."""
        seen: dict[str, dict[str, int]] = {lid: {} for lid in load_ids}
        with _autocommit(self.dsn) as cur:
            for target in self.tables:
                found: dict[str, int] = {}
                cur.execute("select to_regclass(%s)", (target.table,))
                if cur.fetchone()[0] is not None:
                    cur.execute(sql.SQL("select load_id, count(*) from {} where load_id = any(%s) group by load_id")
                                .format(sql.Identifier(target.schema, target.relation)), (list(load_ids),))
                    found = dict(cur.fetchall())
                for lid in load_ids:
                    seen[lid][target.table] = found.get(lid, 0)
        return seen

    @classmethod
    def sweep(cls, dsn: str, state_of, pipeline: str | None = None) -> list[Swept]:
        """Prepared transactions (gid prefix `twophase:`) of loads that are unknown, ABORTED
        or COMMITTED are rolled back (a committed load's own was committed: any left is a
        superseded attempt's); staging tables of loads unknown or ended are dropped. Only
        `pipeline`'s loads, when given."""
        from ...protocol.states import TERMINAL, State

        gids = [g for g in prepared_gids(dsn) if ids.of_pipeline(ids.load_id_of_gid(g), pipeline)]
        tables = {t: lid for t, lid in staging_tables(dsn).items() if ids.of_pipeline(lid, pipeline)}
        states = state_of({ids.load_id_of_gid(g) for g in gids} | set(tables.values()))
        swept = []
        for gid in gids:
            lid = ids.load_id_of_gid(gid)
            state = states.get(lid)
            try:
                if state in (None, State.ABORTED, State.COMMITTED) and rollback_gid(dsn, gid):
                    swept.append(Swept(lid, "orphan prepared transaction rolled back",
                                       f"{gid}; load {'unknown' if state is None else state}"))
            except MissingPrivilege as exc:  # prepared by another role: say so, sweep the rest
                swept.append(Swept(lid, "failed", str(exc)))
        for table, lid in tables.items():
            state = states.get(lid)
            if state is None or state in TERMINAL:
                try:
                    drop_staging_table(dsn, table)
                except MissingPrivilege as exc:  # owned by another role
                    swept.append(Swept(lid or "?", "failed", str(exc)))
                    continue
                swept.append(Swept(lid or "?", "orphan staging table dropped",
                                   f"{ids.STAGING_SCHEMA}.{table}; load {'unknown' if state is None else state}"))
        return swept

    # -- helpers ------------------------------------------------------------------------
    def _committed(self, kind: Kind, vote: Vote | None, marker: tuple[int, int] | None) -> Outcome:
        """A commit's outcome: what readers see now, per table. The commit marker, written in
        the prepared transaction, holds the rows ready() inserted over all tables; ready()
        checked each table's against the vote, and the readied vote keeps them
        (committable["tables"]; a vote of an earlier release has one table, or none named:
        the log's old form). A marker that disagrees with them says nothing per table."""
        if marker is None:
            return Outcome(self.name, kind, f"no commit marker for {self.gid}: the rows made visible are unknown")
        rows, deleted = marker
        counts = {"rows": rows, "deleted": deleted}
        committable = vote.committable if vote is not None else {}
        tables = {t: r["rows"] for t, r in committable.get("tables", {}).items()} or {
            committable.get("table") if vote is not None and vote.counts else self.name: rows}
        if sum(tables.values()) != rows:
            return Outcome(self.name, kind, f"the commit marker of {self.gid} says {rows} rows, the readied vote "
                           f"{sum(tables.values())}: the rows made visible per table are unknown", counts)
        return Outcome(self.name, kind, counts=counts, visible=tables)

    def _marker(self, cur) -> tuple[int, int] | None:
        cur.execute("select to_regclass(%s)", (MARKERS,))
        if cur.fetchone()[0] is None:
            return None
        cur.execute(f"select rows, deleted from {MARKERS} where gid = %s", (self.gid,))
        return cur.fetchone()

    @staticmethod
    def _drop_staging(cur, staging: str) -> int | None:
        cur.execute("select to_regclass(%s)", (staging,))
        if cur.fetchone()[0] is None:
            return None
        cur.execute(f"select count(*) from {staging}")
        staged = cur.fetchone()[0]
        cur.execute(f"drop table {staging}")
        return staged


def _not_as_voted(rows: dict[str, int], vote: Vote) -> str:
    """'' when the staging tables hold the `rows` the vote counted, else what they hold."""
    return "; ".join(f"{where} holds {n} rows, not the {staged} staged: it was emptied while the load waited "
                     "(a Postgres crash restart truncates unlogged tables)"
                     for where, n, staged in _compared(rows, vote))


def _compared(rows: dict[str, int], vote: Vote) -> list[tuple[str, int, int]]:
    """(where, rows, staged) for each table whose `rows` differ from what the vote
    counted; a vote of the old release has only its total (no per-table counts)."""
    if not vote.counts:
        total = sum(rows.values())
        return [] if total == vote.count else [("the staging tables", total, vote.count)]
    return [(f"staging of {t}", n, vote.counts.get(t)) for t, n in rows.items() if n != vote.counts.get(t)]
