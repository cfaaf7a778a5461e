-- A locked-down Postgres: what an admin creates, and grants, so that a role without
-- CREATE on the database runs loads (docs/clusters.md, "A locked-down Postgres").
--
-- Run it as an admin (a superuser, or the database's owner) in every database the
-- pipeline writes to (the transaction log's, and each one holding target tables):
--
--   psql "<admin connection>" -v ON_ERROR_STOP=1 -v role=loader -f docs/sql/least-privilege.sql
--
-- In the log's database, first create the log's tables as that same admin:
--   TWOPHASE_PG_DSN="<admin connection>" python -m twophase migrate
-- and run both again after an upgrade whose release notes say the log's schema changed.
-- Idempotent. The target tables and their grants are yours (see the docs).

\set ON_ERROR_STOP on

-- The commit markers (one row per prepared load) and the staging schema.
create schema if not exists twophase;
create schema if not exists twophase_staging;
create table if not exists twophase.pg_commit_markers (
    gid text primary key, load_id text not null, rows bigint not null,
    deleted bigint not null, prepared_at timestamptz not null default now());

grant usage on schema twophase to :"role";
grant select, insert on twophase.pg_commit_markers to :"role";
-- The role creates and drops its unlogged staging tables here (it owns them).
grant usage, create on schema twophase_staging to :"role";

-- The transaction log's tables, where `python -m twophase migrate` made them.
select set_config('twophase.grantee', :'role', false);
do $$
declare
    grantee text := current_setting('twophase.grantee');
begin
    execute format('grant connect on database %I to %I', current_database(), grantee);
    if to_regclass('twophase.loads') is not null then
        execute format('grant select on twophase.schema_version to %I', grantee);
        execute format('grant select, insert, update on twophase.loads, twophase.votes to %I', grantee);
        execute format('grant delete on twophase.votes to %I', grantee);
        execute format('grant select, insert on twophase.transitions to %I', grantee);
        execute format('grant usage on sequence twophase.transitions_id_seq to %I', grantee);
        execute format('grant select, insert, delete on twophase.quarantine to %I', grantee);
        execute format('grant usage on sequence twophase.quarantine_id_seq to %I', grantee);
        if to_regclass('twophase.source_skips') is not null then
            execute format('grant select, insert on twophase.source_skips to %I', grantee);
            execute format('grant usage on sequence twophase.source_skips_id_seq to %I', grantee);
        end if;
    end if;
end
$$;
