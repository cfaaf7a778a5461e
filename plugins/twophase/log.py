"""The coordinator's durable transaction log: Postgres schema `twophase`.

Tables: `loads` (one row per load: state, decision, reason, phase timestamps, planned
participants), `votes` (one per participant and load), `transitions` (every state change,
kept as history). `transition()` is the only code that changes a load's state.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Iterator

import psycopg2
import psycopg2.errors
import psycopg2.extras

from . import privileges, states
from .errors import MissingPrivilege, Terminal, one_line, servers
from .spec import LoadSpec
from .states import DECISION_OF, TIMESTAMP_OF, State
from .votes import Vote

# Each entry upgrades the schema by one version; applied in order, each exactly once.
MIGRATIONS = [
    """
    create table twophase.loads (
        load_id text primary key,
        pipeline text not null,
        run_id text not null,
        data_interval_start timestamptz,
        data_interval_end timestamptz,
        state text not null,
        decision text,
        reason text,
        participants jsonb not null,
        input jsonb not null default '{}',
        expected_rows bigint,
        began_at timestamptz not null default now(),
        prepared_at timestamptz,
        decided_at timestamptz,
        finished_at timestamptz,
        updated_at timestamptz not null default now()
    );
    create index loads_pipeline_interval on twophase.loads (pipeline, data_interval_start);
    create index loads_open on twophase.loads (state) where state not in ('COMMITTED', 'ABORTED', 'VIOLATED');
    create table twophase.votes (
        load_id text not null references twophase.loads,
        participant text not null,
        yes boolean not null,
        count bigint not null,
        detail jsonb not null,
        reason text not null default '',
        voted_at timestamptz not null default now(),
        primary key (load_id, participant)
    );
    create table twophase.transitions (
        id bigserial primary key,
        load_id text not null references twophase.loads,
        from_state text,
        to_state text not null,
        reason text,
        at timestamptz not null default now()
    );
    create index transitions_load on twophase.transitions (load_id, id);
    """,
    """
    alter table twophase.loads add column metrics jsonb not null default '{}';
    alter table twophase.loads add column prepare_error text;
    """,
    # Per target: a vote's counts and one-line summary, the rows Spark computed.
    """
    alter table twophase.votes add column counts jsonb;
    alter table twophase.votes add column summary text not null default '';
    alter table twophase.loads add column expected jsonb;
    """,
    # The newest loads first, of all pipelines or one: status, the Transactions page, recent().
    """
    create index loads_recent on twophase.loads (began_at desc, load_id);
    create index loads_pipeline_recent on twophase.loads (pipeline, began_at desc, load_id);
    """,
    # Prepare attempts are fenced: each claims the next number, and only the latest may
    # record votes or move the load to PREPARED (0: no attempt claimed yet).
    """
    alter table twophase.loads add column prepare_attempt int not null default 0;
    """,
    # When the load's exposure started: the vote began making its participants ready (a
    # prepared transaction, locks on targets), held until the commit or rollback ends.
    """
    alter table twophase.loads add column exposed_at timestamptz;
    """,
    # The quarantine (twophase.quarantine): rejected input lines kept per load and reason.
    """
    create table twophase.quarantine (
        id bigserial primary key,
        load_id text not null,
        reason text not null,
        source text,
        detail text,
        content text,
        kept_at timestamptz not null default now()
    );
    create index quarantine_load on twophase.quarantine (load_id, reason, id);
    create index quarantine_kept on twophase.quarantine (kept_at);
    """,
    # The audit's report (twophase/audit/report.schema.json), stored before the decision.
    """
    alter table twophase.loads add column audit jsonb;
    """,
    # A person's approval, when the run asked for one (twophase/approval.py).
    """
    alter table twophase.loads add column approval jsonb;
    """,
    # Each participant's commit outcome (kind, seconds, count): the pace of earlier commits,
    # which the vote's budgets estimate the next ones from (Participant.budget).
    """
    alter table twophase.loads add column outcomes jsonb;
    """,
]

# What a role that runs loads needs on the log (its schema made and migrated by an admin):
# checked by begin, listed by docs/clusters.md and docs/sql/least-privilege.sql.
WRITER_GRANTS = [
    *privileges.schemas(["twophase"], "USAGE"),
    *privileges.tables(["twophase.schema_version"], "SELECT"),
    *privileges.tables(["twophase.loads", "twophase.votes"], "SELECT", "INSERT", "UPDATE"),
    *privileges.tables(["twophase.votes"], "DELETE"),  # a new prepare attempt drops the last one's votes
    *privileges.tables(["twophase.transitions"], "SELECT", "INSERT"),
    privileges.Grant("USAGE", "sequence", "twophase.transitions_id_seq"),
    *privileges.tables(["twophase.quarantine"], "SELECT", "INSERT", "DELETE"),  # a retry replaces; retention deletes
    privileges.Grant("USAGE", "sequence", "twophase.quarantine_id_seq"),
]


def _exists(cur, query: str) -> bool:
    cur.execute(query)
    return cur.fetchone() is not None


class UnknownLoad(Terminal, LookupError):
    pass


class StateConflict(Terminal):
    """The load is not in a state this step may start from (another actor moved it, or it
    ended): retrying the step cannot help."""

    def __init__(self, load_id: str, current: State, expected: Iterable[State]):
        names = ", ".join(str(s) for s in expected)
        super().__init__(f"load {load_id} is {current}, expected one of: {names}")
        self.load_id, self.current = load_id, current


class Superseded(StateConflict):
    """A prepare attempt is no longer the load's latest: a later attempt claimed the load
    (a retry started while this one still ran: a zombie Spark application), or the load
    was decided meanwhile. Nothing this attempt staged may count."""

    def __init__(self, load_id: str, attempt: int, latest: int, current: State):
        Terminal.__init__(self, (
            f"prepare attempt {attempt} of load {load_id} was superseded by attempt {latest} (a retry started while "
            f"it still ran); the load is {current}. This attempt's staging is discarded and never counts")
            if latest != attempt else (
            f"prepare attempt {attempt} of load {load_id} is too late: the load is {current}. This attempt's "
            "staging is discarded and never counts"))
        self.load_id, self.current, self.attempt, self.latest = load_id, current, attempt, latest


@dataclass(frozen=True)
class Load:
    load_id: str
    pipeline: str
    run_id: str
    state: State
    decision: str | None
    reason: str | None
    participants: dict
    input: dict
    expected_rows: int | None
    expected: dict | None       # per target (None: logged before targets had names)
    metrics: dict
    prepare_error: str | None
    data_interval_start: datetime | None
    data_interval_end: datetime | None
    began_at: datetime
    prepared_at: datetime | None
    decided_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    prepare_attempt: int = 0    # the latest prepare attempt claimed (0: none yet)
    exposed_at: datetime | None = None  # the vote began making participants ready (holding locks)
    audit: dict | None = None   # the audit's report (audit/report.schema.json); None: not audited
    approval: dict | None = None  # asked and answered (twophase/approval.py); None: not asked
    outcomes: dict | None = None  # participant -> its commit's {kind, seconds, count}; None: not committed

    @property
    def attempt(self) -> int:
        """The prepare attempt whose staging the load's vote, commit and rollback act on."""
        return max(1, self.prepare_attempt)

    @classmethod
    def from_row(cls, row: dict) -> "Load":
        return cls(**{**row, "state": State(row["state"])})

    def spec(self) -> LoadSpec:
        return LoadSpec.from_log(self.__dict__)


@dataclass(frozen=True)
class Transition:
    from_state: str | None
    to_state: str
    reason: str | None
    at: datetime


class TransactionLog:
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

    def ensure_schema(self) -> int:
        """Create or upgrade schema `twophase`; idempotent and safe to run concurrently.

        Creates only what is missing, so a role without CREATE on the database runs loads
        once an admin made the schema and ran the migrations (docs/clusters.md, "A
        locked-down Postgres"); a schema behind this release's version needs its tables'
        owner: MissingPrivilege says so."""
        with self._cursor() as cur:
            if self._version(cur) == len(MIGRATIONS):
                return len(MIGRATIONS)
            cur.execute("select pg_advisory_xact_lock(hashtext('twophase.schema'))")
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

    def begin(self, spec: LoadSpec, plan: Callable[[list[Load]], LoadSpec] | None = None) -> tuple[Load, bool]:
        """Write the load's row in state PREPARING, before anything is staged.

        Idempotent: a retried begin finds the row and returns it with created=False.
        For a new load with a data interval, `plan` is called with the pipeline's other
        loads of the same interval, under a lock that serializes begins of that interval;
        it returns the spec to log, or raises to refuse the load (nothing is written).
        """
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
            cur.execute(
                """insert into twophase.loads (load_id, pipeline, run_id, data_interval_start,
                       data_interval_end, state, participants, input)
                   values (%s, %s, %s, %s, %s, %s, %s, %s)
                   on conflict (load_id) do nothing returning load_id""",
                (spec.load_id, spec.pipeline, spec.run_id, interval[0], interval[1], State.PREPARING.value,
                 json.dumps(spec.to_log()), json.dumps(spec.input)),
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

    def transition(self, load_id: str, to: State, *, expect: Iterable[State] | None = None,
                   reason: str | None = None, attempt: int | None = None) -> tuple[Load, bool]:
        """Move a load to state `to`: the only way a state changes.

        - already in `to`: nothing changes, returns (load, False), so retries are harmless;
        - current state not in `expect` (when given): StateConflict;
        - move not in the transition table: states.IllegalTransition;
        - `attempt` given (a prepare attempt moving its load to PREPARED) and a later
          attempt claimed the load: Superseded;
        - otherwise a compare-and-set on the current state, the decision when `to` is
          COMMITTING or ABORTING, the phase timestamp and a history row, in one transaction.
        """
        with self._cursor() as cur:
            row = self._lock(cur, load_id)
            current = State(row["state"])
            if attempt is not None and row["prepare_attempt"] != attempt:
                raise Superseded(load_id, attempt, row["prepare_attempt"], current)
            if current == to:
                changed = False
            else:
                if expect is not None and current not in set(expect):
                    raise StateConflict(load_id, current, expect)
                states.check(load_id, current, to)
                decision = DECISION_OF.get(to)
                stamp = TIMESTAMP_OF.get(to)
                cur.execute(
                    f"""update twophase.loads set state = %s, decision = coalesce(%s, decision),
                           reason = coalesce(%s, reason), updated_at = now()
                           {f', {stamp} = now()' if stamp else ''}
                        where load_id = %s and state = %s""",
                    (to.value, decision.value if decision else None, reason, load_id, current.value),
                )
                if cur.rowcount != 1:  # cannot happen under the row lock; guard anyway
                    raise StateConflict(load_id, current, [current])
                cur.execute(
                    "insert into twophase.transitions (load_id, from_state, to_state, reason) values (%s, %s, %s, %s)",
                    (load_id, current.value, to.value, reason),
                )
                changed = True
        return self.get(load_id), changed

    def claim_prepare(self, load_id: str) -> int:
        """Start a prepare attempt: the load (PREPARING) gets the next attempt number, and
        votes and errors of earlier attempts are dropped; returns the number. From now on
        only this attempt may record votes or move the load to PREPARED (Superseded for the
        others). Not PREPARING: StateConflict."""
        with self._cursor() as cur:
            row = self._lock(cur, load_id)
            if row["state"] != State.PREPARING.value:
                raise StateConflict(load_id, State(row["state"]), [State.PREPARING])
            cur.execute("update twophase.loads set prepare_attempt = prepare_attempt + 1, prepare_error = null, "
                        "updated_at = now() where load_id = %s returning prepare_attempt", (load_id,))
            attempt = cur.fetchone()["prepare_attempt"]
            cur.execute("delete from twophase.votes where load_id = %s", (load_id,))
            return attempt

    @staticmethod
    def _lock(cur, load_id: str) -> dict:
        """The load's state and prepare attempt, its row locked until the transaction ends."""
        cur.execute("select state, prepare_attempt from twophase.loads where load_id = %s for update", (load_id,))
        row = cur.fetchone()
        if row is None:
            raise UnknownLoad(f"no load {load_id!r} in the transaction log")
        return row

    def _fence(self, cur, load_id: str, attempt: int | None) -> None:
        """Under the load's row lock: Superseded unless `attempt` (when given) is the
        latest and the load still PREPARING."""
        if attempt is None:
            return
        row = self._lock(cur, load_id)
        if row["prepare_attempt"] != attempt or row["state"] != State.PREPARING.value:
            raise Superseded(load_id, attempt, row["prepare_attempt"], State(row["state"]))

    def set_expected(self, load_id: str, expected: dict[str, int], metrics: dict | None = None,
                     rows: int | None = None, attempt: int | None = None) -> None:
        """Spark's row count per target of the load, and the job's own figures (input
        lines, rejects...). `rows`: the load's row count the quality rules judge (its
        first target's; default the largest). `attempt`: fenced (Superseded)."""
        rows = max(expected.values(), default=0) if rows is None else rows
        with self._cursor() as cur:
            self._fence(cur, load_id, attempt)
            cur.execute("update twophase.loads set expected = %s, expected_rows = %s, metrics = %s, "
                        "prepare_error = null, updated_at = now() where load_id = %s",
                        (json.dumps(expected), rows, json.dumps(metrics or {}), load_id))

    def record_audit(self, load_id: str, report: dict) -> bool:
        """Store the audit's report while the load is PREPARED (before its decision);
        False when it was decided meanwhile (the report is then not the load's)."""
        return self._set_while_prepared(load_id, "audit", report)

    def record_approval(self, load_id: str, approval: dict) -> bool:
        """Store the load's approval (asked, then answered) while it is PREPARED; False
        when it was decided meanwhile (recovery presumed it abandoned)."""
        return self._set_while_prepared(load_id, "approval", approval)

    def _set_while_prepared(self, load_id: str, column: str, value: dict) -> bool:
        """Set one JSON column of a PREPARED load; False when it is no longer PREPARED."""
        with self._cursor() as cur:
            cur.execute(f"update twophase.loads set {column} = %s, updated_at = now() where load_id = %s "
                        "and state = %s", (json.dumps(value), load_id, State.PREPARED.value))
            return cur.rowcount == 1

    def quarantine(self, load_id: str, kept: list, reasons: list[str]) -> int:
        """Keep `kept` (quarantine.Kept) in the quarantine of the log's database, in place
        of the load's entries of `reasons`; how many were kept."""
        from . import quarantine

        return quarantine.keep(self._dsn, load_id, kept, reasons)

    def record_outcomes(self, load_id: str, outcomes: dict) -> None:
        """Each participant's commit outcome ({kind, seconds, count}), kept while the load
        is COMMITTING, right before it is logged COMMITTED."""
        with self._cursor() as cur:
            cur.execute("update twophase.loads set outcomes = %s, updated_at = now() where load_id = %s "
                        "and state = %s", (json.dumps(outcomes), load_id, State.COMMITTING.value))

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

    def mark_exposed(self, load_id: str) -> None:
        """The vote starts making the load's participants ready: its exposure window (what
        it holds on targets until phase 2 ends) starts now, unless an earlier vote started it."""
        with self._cursor() as cur:
            cur.execute("update twophase.loads set exposed_at = coalesce(exposed_at, now()), updated_at = now() "
                        "where load_id = %s", (load_id,))

    def record_prepare_error(self, load_id: str, error: str, attempt: int | None = None) -> None:
        """Why the prepare job failed, for the vote's reason and the rollback's log; an
        attempt's error only while it is the latest (a superseded one's is not the load's)."""
        with self._cursor() as cur:
            cur.execute("update twophase.loads set prepare_error = %s, updated_at = now() where load_id = %s "
                        "and (%s::int is null or prepare_attempt = %s)", (error[:4000], load_id, attempt, attempt))

    def record_vote(self, load_id: str, vote: Vote, attempt: int | None = None) -> None:
        """Store (or replace) a participant's vote; `attempt`: fenced (Superseded)."""
        with self._cursor() as cur:
            self._fence(cur, load_id, attempt)
            cur.execute(
                """insert into twophase.votes (load_id, participant, yes, count, detail, reason, counts, summary)
                   values (%s, %s, %s, %s, %s, %s, %s, %s)
                   on conflict (load_id, participant) do update set yes = excluded.yes,
                       count = excluded.count, detail = excluded.detail, reason = excluded.reason,
                       counts = excluded.counts, summary = excluded.summary, voted_at = now()""",
                (load_id, vote.participant, vote.yes, vote.count, json.dumps(vote.committable), vote.reason,
                 json.dumps(vote.counts), vote.summary),
            )

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

    def states_of(self, load_ids: Iterable[str]) -> dict[str, State]:
        with self._cursor() as cur:
            cur.execute("select load_id, state from twophase.loads where load_id = any(%s)", (list(load_ids),))
            return {r["load_id"]: State(r["state"]) for r in cur.fetchall()}
