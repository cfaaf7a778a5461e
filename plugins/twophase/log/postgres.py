"""The transaction log in Postgres: schema `twophase` (log/schema.py) in the log's database.

The rules that change a load are the contract's (log/contract.py); this class stores and
reads. A rule's transaction locks the load's row (SELECT ... FOR UPDATE) and writes its
changes before COMMIT, so concurrent steps of one load (a pipeline's task, recovery, a
retried task) see each other's changes whole or not at all.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import timedelta
from typing import Callable, Iterable, Iterator

import psycopg2
import psycopg2.errors
import psycopg2.extras
from psycopg2 import sql

from .. import ids, privileges
from ..errors import MissingPrivilege, one_line
from ..gates.quarantine import Kept
from ..protocol import states
from ..protocol.states import State
from ..protocol.votes import Vote
from ..server_errors import servers
from ..spec import LoadSpec
from .conflicts import UnknownLoad
from .contract import NOW, Locked, TransactionLog
from .records import Load, Skip, Transition
from .schema import MIGRATIONS, WRITER_GRANTS


def _text(value: str | None) -> str | None:
    return None if value is None else value.replace("\x00", "\\x00")


def _exists(cur, query: str) -> bool:
    cur.execute(query)
    return cur.fetchone() is not None


class _RowLocked(Locked):
    """A load's row locked FOR UPDATE in an open transaction; changes written at once."""

    def __init__(self, cur, load_id: str, row: dict, now):
        self.cur, self.load_id, self.row, self.now = cur, load_id, row, now

    def set(self, **columns) -> None:
        values = {"updated_at": NOW, **columns}
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = now()").format(sql.Identifier(c)) if v is NOW else sql.SQL("{} = %s").format(sql.Identifier(c))
            for c, v in values.items())
        params = [json.dumps(v) if isinstance(v, (dict, list)) else v for v in values.values() if v is not NOW]
        self.cur.execute(sql.SQL("update twophase.loads set {} where load_id = %s").format(assignments),
                         [*params, self.load_id])

    def add_transition(self, from_state: State, to_state: State, reason: str | None) -> None:
        self.cur.execute("insert into twophase.transitions (load_id, from_state, to_state, reason) "
                         "values (%s, %s, %s, %s)", (self.load_id, from_state.value, to_state.value, reason))

    def drop_votes(self) -> None:
        self.cur.execute("delete from twophase.votes where load_id = %s", (self.load_id,))

    def put_vote(self, vote: Vote) -> None:
        self.cur.execute(
            """insert into twophase.votes (load_id, participant, yes, count, detail, reason, counts, summary)
               values (%s, %s, %s, %s, %s, %s, %s, %s)
               on conflict (load_id, participant) do update set yes = excluded.yes,
                   count = excluded.count, detail = excluded.detail, reason = excluded.reason,
                   counts = excluded.counts, summary = excluded.summary, voted_at = now()""",
            (self.load_id, vote.participant, vote.yes, vote.count, json.dumps(vote.committable), vote.reason,
             json.dumps(vote.counts), vote.summary))


class PostgresLog(TransactionLog):
    def __init__(self, dsn: str):
        self._dsn = dsn

    @contextmanager
    def _cursor(self) -> Iterator[psycopg2.extras.RealDictCursor]:
        """One transaction: committed on success, rolled back on any error."""
        with servers(pg_dsn=self._dsn):  # the log's server down: PostgresUnreachable, one line
            conn = psycopg2.connect(self._dsn)
            try:
                with conn, conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                    yield cur
            finally:
                conn.close()

    @contextmanager
    def _locked(self, load_id: str) -> Iterator[Locked]:
        with self._cursor() as cur:
            cur.execute("select *, now() as locked_at from twophase.loads where load_id = %s for update", (load_id,))
            row = cur.fetchone()
            if row is None:
                raise UnknownLoad(f"no load {load_id!r} in the transaction log")
            now = row.pop("locked_at")
            yield _RowLocked(cur, load_id, row, now)

    def ensure_schema(self) -> int:
        """Create or upgrade schema `twophase`; idempotent and safe to run concurrently.

        Creates only what is missing, so a role without CREATE on the database runs loads
        once an admin made the schema and ran the migrations (docs/clusters.md, "A
        locked-down Postgres"); a schema behind this release's version needs its tables'
        owner: MissingPrivilege says so."""
        with self._cursor() as cur:
            if self._version(cur) == len(MIGRATIONS):
                return len(MIGRATIONS)
            cur.execute("select pg_advisory_xact_lock(hashtext(%s))", (ids.CREATING_LOCK,))
            if not _exists(cur, "select 1 from pg_namespace where nspname = 'twophase'"):
                cur.execute("create schema twophase")
            if self._version(cur) is None:
                cur.execute("create table twophase.schema_version (version int not null)")
            current = self._version(cur) or 0
            for version, ddl in enumerate(MIGRATIONS[current:], start=current + 1):
                try:
                    cur.execute(ddl)
                except psycopg2.errors.InsufficientPrivilege as exc:
                    raise MissingPrivilege(one_line(
                        f"the transaction log's schema twophase is at version {current} and this release needs "
                        f"{len(MIGRATIONS)}; only the owner of its tables can upgrade it ({exc.diag.message_primary})"
                        f": run `python -m twophase migrate` as that role {privileges.DOCS}", 1000)) from None
                cur.execute("insert into twophase.schema_version values (%s)", (version,))
            return len(MIGRATIONS)

    @staticmethod
    def _version(cur) -> int | None:
        """The log schema's version; None when twophase.schema_version does not exist."""
        if not _exists(cur, """select 1 from pg_class c join pg_namespace n on n.oid = c.relnamespace
                               where n.nspname = 'twophase' and c.relname = 'schema_version'"""):
            return None
        cur.execute("select coalesce(max(version), 0) as v from twophase.schema_version")
        return cur.fetchone()["v"]

    def begin(self, spec: LoadSpec, plan: Callable[[list[Load]], LoadSpec] | None = None,
              fix: Callable[[LoadSpec, list[Load]], LoadSpec] | None = None) -> tuple[Load, bool]:
        """See TransactionLog.begin. The locks are transaction-scoped advisory locks, the
        interval's first, then the source's."""
        interval = spec.data_interval or (None, None)
        with self._cursor() as cur:
            privileges.require(cur, WRITER_GRANTS)  # before anything is written
            cur.execute("select * from twophase.loads where load_id = %s", (spec.load_id,))
            row = cur.fetchone()
            if row is not None:
                return Load.from_row(row), False
            if plan is not None and spec.data_interval:
                cur.execute("select pg_advisory_xact_lock(hashtext('twophase.interval'), hashtext(%s))",
                            (f"{spec.pipeline} {interval[0]}",))
                cur.execute("select * from twophase.loads where pipeline = %s and data_interval_start = %s "
                            "and load_id <> %s order by began_at", (spec.pipeline, interval[0], spec.load_id))
                spec = plan([Load.from_row(r) for r in cur.fetchall()])
            key = spec.source.key if spec.source is not None else None
            if fix is not None and key is not None:
                cur.execute("select pg_advisory_xact_lock(hashtext('twophase.source'), hashtext(%s))", (key,))
                cur.execute("select * from twophase.loads where source = %s and load_id <> %s order by began_at",
                            (key, spec.load_id))
                spec = fix(spec, [Load.from_row(r) for r in cur.fetchall()])
            cur.execute(
                """insert into twophase.loads (load_id, pipeline, run_id, data_interval_start,
                       data_interval_end, state, participants, input, source, source_range)
                   values (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                   on conflict (load_id) do nothing returning load_id""",
                (spec.load_id, spec.pipeline, spec.run_id, interval[0], interval[1], State.PREPARING.value,
                 json.dumps(spec.to_log()), json.dumps(spec.input), key,
                 None if spec.source_range is None else json.dumps(spec.source_range)),
            )
            created = cur.fetchone() is not None
            if created:
                cur.execute("insert into twophase.transitions (load_id, from_state, to_state) values (%s, null, %s)",
                            (spec.load_id, State.PREPARING.value))
        return self.get(spec.load_id), created

    def get(self, load_id: str) -> Load:
        with self._cursor() as cur:
            cur.execute("select * from twophase.loads where load_id = %s", (load_id,))
            row = cur.fetchone()
        if row is None:
            raise UnknownLoad(f"no load {load_id!r} in the transaction log")
        return Load.from_row(row)

    def quarantine(self, load_id: str, kept: list, reasons: list[str] | None = None) -> int:
        """Table twophase.quarantine; a NUL character, which Postgres text cannot hold, is
        kept as the four characters `\\x00`."""
        with self._cursor() as cur:
            cur.execute("delete from twophase.quarantine where load_id = %s and (%s::text[] is null or "
                        "reason = any(%s::text[]))", (load_id, reasons, reasons))
            psycopg2.extras.execute_values(
                cur, "insert into twophase.quarantine (load_id, reason, source, detail, content) values %s",
                [(load_id, _text(k.reason) or "", _text(k.source), _text(k.detail), _text(k.content)) for k in kept],
                page_size=1000)
        return len(kept)

    def quarantined(self, load_id: str, limit: int | None = None) -> list[Kept]:
        with self._cursor() as cur:
            cur.execute("select reason, source, detail, content, kept_at from twophase.quarantine where load_id = %s "
                        "order by reason, id limit %s", (load_id, limit))
            return [Kept(**row) for row in cur.fetchall()]

    def sweep_quarantine(self, older_than: timedelta, pipeline: str | None = None) -> int:
        prefix = None if pipeline is None else pipeline + "."
        with self._cursor() as cur:
            cur.execute("delete from twophase.quarantine where kept_at < now() - %(age)s and "
                        "(%(prefix)s::text is null or left(load_id, length(%(prefix)s)) = %(prefix)s)",
                        {"age": older_than, "prefix": prefix})
            return cur.rowcount

    def commit_history(self, pipeline: str, participant: str, limit: int = 10) -> list[dict]:
        """The participant's commit outcomes in the pipeline's last `limit` committed loads
        that recorded one, newest first."""
        with self._cursor() as cur:
            cur.execute("select outcomes -> %s as outcome from twophase.loads where pipeline = %s and state = %s "
                        "and outcomes ? %s order by finished_at desc limit %s",
                        (participant, pipeline, State.COMMITTED.value, participant, limit))
            return [row["outcome"] for row in cur.fetchall()]

    def last_committed(self, pipeline: str, other_than: str) -> Load | None:
        """The pipeline's most recently committed load other than `other_than`."""
        with self._cursor() as cur:
            cur.execute("select * from twophase.loads where pipeline = %s and state = %s and load_id <> %s "
                        "order by finished_at desc limit 1", (pipeline, State.COMMITTED.value, other_than))
            row = cur.fetchone()
        return None if row is None else Load.from_row(row)

    def votes(self, load_id: str) -> dict[str, Vote]:
        with self._cursor() as cur:
            cur.execute("select participant, yes, count, detail as committable, reason, "
                        "coalesce(counts, '{}') as counts, summary from twophase.votes where load_id = %s",
                        (load_id,))
            return {r["participant"]: Vote(**r) for r in cur.fetchall()}

    def votes_of(self, load_ids: list[str]) -> dict[str, dict[str, Vote]]:
        """The votes of many loads in one query: {load_id: {participant: Vote}}."""
        found: dict[str, dict[str, Vote]] = {lid: {} for lid in load_ids}
        with self._cursor() as cur:
            cur.execute("select load_id, participant, yes, count, detail as committable, reason, "
                        "coalesce(counts, '{}') as counts, summary from twophase.votes where load_id = any(%s)",
                        (list(load_ids),))
            for row in cur.fetchall():
                r = dict(row)
                load_id = r.pop("load_id")
                found[load_id][r["participant"]] = Vote(**r)
        return found

    def history(self, load_id: str) -> list[Transition]:
        with self._cursor() as cur:
            cur.execute("select from_state, to_state, reason, at from twophase.transitions "
                        "where load_id = %s order by id", (load_id,))
            return [Transition(**r) for r in cur.fetchall()]

    def recent(self, limit: int = 20, pipeline: str | None = None) -> list[Load]:
        with self._cursor() as cur:
            cur.execute("select * from twophase.loads where (%s::text is null or pipeline = %s) "
                        "order by began_at desc limit %s", (pipeline, pipeline, limit))
            return [Load.from_row(r) for r in cur.fetchall()]

    def unresolved(self, pipeline: str | None = None) -> list[Load]:
        """Loads not yet in a terminal state (of one pipeline, when given), oldest first."""
        terminal = [s.value for s in states.TERMINAL]
        with self._cursor() as cur:
            cur.execute("select * from twophase.loads where state <> all(%s) and (%s::text is null or pipeline = %s) "
                        "order by began_at", (terminal, pipeline, pipeline))
            return [Load.from_row(r) for r in cur.fetchall()]

    def skip(self, source: str, decide, by: str, why: str) -> Skip:
        """See TransactionLog.skip: under the advisory lock of the source's begins."""
        with self._cursor() as cur:
            privileges.require(cur, WRITER_GRANTS)
            cur.execute("select pg_advisory_xact_lock(hashtext('twophase.source'), hashtext(%s))", (source,))
            cur.execute("select * from twophase.loads where source = %s order by began_at", (source,))
            loads = [Load.from_row(r) for r in cur.fetchall()]
            skipped = decide(loads, self._skips(cur, source))
            cur.execute("insert into twophase.source_skips (source, source_range, by_whom, why) values (%s, %s, %s, %s) "
                        "returning source, source_range, by_whom as by, why, at", (source, json.dumps(skipped), by, why))
            return Skip(**cur.fetchone())

    def skips(self, source: str) -> list[Skip]:
        with self._cursor() as cur:
            return self._skips(cur, source)

    @staticmethod
    def _skips(cur, source: str) -> list[Skip]:
        cur.execute("select source, source_range, by_whom as by, why, at from twophase.source_skips "
                    "where source = %s order by at, id", (source,))
        return [Skip(**r) for r in cur.fetchall()]

    def of_source(self, source: str) -> list[Load]:
        with self._cursor() as cur:
            cur.execute("select * from twophase.loads where source = %s order by began_at", (source,))
            return [Load.from_row(r) for r in cur.fetchall()]

    def states_of(self, load_ids: Iterable[str]) -> dict[str, State]:
        with self._cursor() as cur:
            cur.execute("select load_id, state from twophase.loads where load_id = any(%s)", (list(load_ids),))
            return {r["load_id"]: State(r["state"]) for r in cur.fetchall()}
