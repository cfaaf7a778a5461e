"""Recovery: resolve what crashes left in doubt, and clean orphans.

- PREPARING or PREPARED past the decision deadline: presumed abort (roll back, ABORTED).
  Younger ones are left alone: their prepare or vote may still be running.
- COMMITTING: re-drive commit (decided means done). ABORTING: re-drive rollback.
- Orphans: prepared transactions (gid prefix `twophase:`) and staging tables whose load
  is unknown or already finished are rolled back or dropped.
Every step is idempotent, so recovery may run while pipelines run, and run again.
A server that is down leaves its loads as "retry later" (one line naming it); with the
log's own Postgres down, recover raises PostgresUnreachable (one line) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from . import coordinator, ids
from .errors import servers
from .log import TransactionLog
from .participants import postgres
from .spec import Connections
from .states import TERMINAL, State

DEFAULT_DEADLINE = timedelta(hours=2)


@dataclass(frozen=True)
class Action:
    load_id: str
    action: str   # presumed abort | commit re-driven | rollback re-driven | waiting | retry later | failed | orphan ...
    detail: str = ""

    def describe(self) -> str:
        return f"{self.load_id}: {self.action}" + (f" ({self.detail})" if self.detail else "")


def recover(log: TransactionLog, conns: Connections, deadline: timedelta = DEFAULT_DEADLINE,
            now: datetime | None = None) -> list[Action]:
    with servers(pg_dsn=conns.pg_dsn):
        log.ensure_schema()
        now = now or datetime.now(timezone.utc)
        actions = [_resolve(log, conns, load, deadline, now) for load in log.unresolved()]
        return actions + _clean_orphans(log, conns)


def _resolve(log, conns, load, deadline, now) -> Action:
    lid = load.load_id
    try:
        if load.state in (State.PREPARING, State.PREPARED):
            age = now - load.began_at
            if age < deadline:
                return Action(lid, "waiting", f"{load.state} for {_minutes(age)}, presumed abort after {_minutes(deadline)}")
            outcomes = coordinator.rollback(log, conns, lid, reason=(
                f"presumed abort: no decision {_minutes(deadline)} after the load began (recovery)"))
            return Action(lid, "presumed abort", _describe(outcomes))
        if load.state == State.COMMITTING:
            return Action(lid, "commit re-driven", _describe(coordinator.commit(log, conns, lid)))
        return Action(lid, "rollback re-driven", _describe(coordinator.rollback(log, conns, lid)))
    except coordinator.RetryLater as exc:
        return Action(lid, "retry later", str(exc))
    except (coordinator.LoadAborted, coordinator.ProtocolViolation) as exc:
        return Action(lid, "failed", str(exc))


def _clean_orphans(log: TransactionLog, conns: Connections) -> list[Action]:
    gids = postgres.prepared_gids(conns.pg_dsn)
    tables = postgres.staging_tables(conns.pg_dsn)
    load_ids = {ids.load_id_of_gid(g) for g in gids} | set(tables.values())
    states = log.states_of(load_ids)
    actions = []
    for gid in gids:
        lid = ids.load_id_of_gid(gid)
        state = states.get(lid)
        if state is None or state == State.ABORTED:
            if postgres.rollback_gid(conns.pg_dsn, gid):
                actions.append(Action(lid, "orphan prepared transaction rolled back",
                                      f"{gid}; load {'unknown' if state is None else state}"))
    for table, lid in tables.items():
        state = states.get(lid)
        if state is None or state in TERMINAL:
            postgres.drop_staging_table(conns.pg_dsn, table)
            actions.append(Action(lid or "?", "orphan staging table dropped",
                                  f"{ids.STAGING_SCHEMA}.{table}; load {'unknown' if state is None else state}"))
    return actions


def _describe(outcomes) -> str:
    return "; ".join(o.describe() for o in outcomes) or "nothing left to do"


def _minutes(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 60:.0f} min"
