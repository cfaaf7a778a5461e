"""The Postgres log's schema `twophase`: its migrations, and the grants a role that runs
loads needs on it.

Tables: `loads` (one row per load: state, decision, reason, phase timestamps, planned
participants), `votes` (one per participant and load), `transitions` (every state change,
kept as history), `quarantine` (rejected input lines kept per load)."""

from __future__ import annotations

from .. import privileges

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
    # A person's approval, when the run asked for one (twophase/gates/approval.py).
    """
    alter table twophase.loads add column approval jsonb;
    """,
    # Each participant's commit outcome (kind, seconds, count): the pace of earlier commits,
    # which the vote's budgets estimate the next ones from (Participant.budget).
    """
    alter table twophase.loads add column outcomes jsonb;
    """,
    # Phase 2 has one driver at a time: who holds the load's lease, and until when
    # (TransactionLog.claim_driver; a driver that dies lets it expire).
    """
    alter table twophase.loads add column driver text;
    alter table twophase.loads add column driver_until timestamptz;
    """,
    # What a load reads of its source, fixed at begin (twophase/sources): the source's key,
    # so the next load of it continues where the last committed one ended.
    """
    alter table twophase.loads add column source text;
    alter table twophase.loads add column source_range jsonb;
    create index loads_source on twophase.loads (source, began_at) where source is not null;
    """,
    # Records of a source that no load could read (deleted by a retention first), skipped
    # by an operator (python -m twophase skip-deleted): the next load starts after them.
    """
    create table twophase.source_skips (
        id bigserial primary key,
        source text not null,
        source_range jsonb not null,
        by_whom text not null,
        why text not null,
        at timestamptz not null default now()
    );
    create index source_skips_source on twophase.source_skips (source, at);
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
    *privileges.tables(["twophase.source_skips"], "SELECT", "INSERT"),  # begin reads them; an operator skips
    privileges.Grant("USAGE", "sequence", "twophase.source_skips_id_seq"),
]
