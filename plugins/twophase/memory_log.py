"""The transaction log in memory: TransactionLog's interface and rules, without a server.

For serverless tests of the coordinator. Each method mirrors the TransactionLog method of
the same name, statement by statement; rows are dicts shaped like `twophase.loads`, and
every read builds a fresh Load (JSON columns copied through JSON, as jsonb would), so a
caller can never change the log by mutating what it got. One lock stands for Postgres'
row locks and transactions (process-local).

Known differences: timestamps come from `clock` (default: now, UTC), and a naive ISO
timestamp of a data interval is read as UTC (Postgres reads it in the session's zone);
rows with the same began_at keep insertion order (Postgres: unspecified).
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import Callable, Iterable

from . import states
from .log import MIGRATIONS, Load, StateConflict, Superseded, Transition, UnknownLoad
from .spec import LoadSpec
from .states import DECISION_OF, TIMESTAMP_OF, State
from .votes import Vote

def _json(value):
    return json.loads(json.dumps(value))


def _timestamp(iso: str | None) -> datetime | None:
    if iso is None:
        return None
    at = datetime.fromisoformat(str(iso))
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


class MemoryLog:
    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self._clock = clock
        self._loads: dict[str, dict] = {}
        self._votes: dict[str, dict[str, dict]] = {}
        self._transitions: dict[str, list[Transition]] = {}
        self._lock = threading.RLock()
        self.quarantined: dict[str, list] = {}  # load id -> its kept entries (quarantine.Kept)

    def ensure_schema(self) -> int:
        return len(MIGRATIONS)

    def begin(self, spec: LoadSpec, plan: Callable[[list[Load]], LoadSpec] | None = None) -> tuple[Load, bool]:
        interval = spec.data_interval or (None, None)
        with self._lock:
            if spec.load_id in self._loads:
                return self.get(spec.load_id), False
            start = _timestamp(interval[0])
            if plan is not None and spec.data_interval:
                others = [self._load(r) for r in self._by_began(
                    r for r in self._loads.values() if r["pipeline"] == spec.pipeline
                    and r["data_interval_start"] == start and r["load_id"] != spec.load_id)]
                spec = plan(others)
            now = self._clock()
            self._loads[spec.load_id] = dict(
                load_id=spec.load_id, pipeline=spec.pipeline, run_id=spec.run_id, state=State.PREPARING.value,
                decision=None, reason=None, participants=_json(spec.to_log()), input=_json(spec.input),
                expected_rows=None, expected=None, metrics={}, prepare_error=None,
                data_interval_start=start, data_interval_end=_timestamp(interval[1]),
                began_at=now, prepared_at=None, decided_at=None, finished_at=None, updated_at=now,
                prepare_attempt=0, exposed_at=None, audit=None, approval=None, outcomes=None)
            self._transitions[spec.load_id] = [Transition(None, State.PREPARING.value, None, now)]
            return self.get(spec.load_id), True

    def get(self, load_id: str) -> Load:
        with self._lock:
            return self._load(self._row(load_id))

    def transition(self, load_id: str, to: State, *, expect: Iterable[State] | None = None,
                   reason: str | None = None, attempt: int | None = None) -> tuple[Load, bool]:
        with self._lock:
            row = self._row(load_id)
            current = State(row["state"])
            if attempt is not None and row["prepare_attempt"] != attempt:
                raise Superseded(load_id, attempt, row["prepare_attempt"], current)
            if current == to:
                changed = False
            else:
                if expect is not None and current not in set(expect):
                    raise StateConflict(load_id, current, expect)
                states.check(load_id, current, to)
                decision, stamp, now = DECISION_OF.get(to), TIMESTAMP_OF.get(to), self._clock()
                row.update(state=to.value, updated_at=now)
                if decision is not None:
                    row["decision"] = decision.value
                if reason is not None:
                    row["reason"] = reason
                if stamp:
                    row[stamp] = now
                self._transitions[load_id].append(Transition(current.value, to.value, reason, now))
                changed = True
            return self.get(load_id), changed

    def claim_prepare(self, load_id: str) -> int:
        with self._lock:
            row = self._row(load_id)
            if row["state"] != State.PREPARING.value:
                raise StateConflict(load_id, State(row["state"]), [State.PREPARING])
            row.update(prepare_attempt=row["prepare_attempt"] + 1, prepare_error=None, updated_at=self._clock())
            self._votes.pop(load_id, None)
            return row["prepare_attempt"]

    def _fence(self, load_id: str, attempt: int | None) -> None:
        if attempt is None:
            return
        row = self._row(load_id)
        if row["prepare_attempt"] != attempt or row["state"] != State.PREPARING.value:
            raise Superseded(load_id, attempt, row["prepare_attempt"], State(row["state"]))

    def set_expected(self, load_id: str, expected: dict[str, int], metrics: dict | None = None,
                     rows: int | None = None, attempt: int | None = None) -> None:
        rows = max(expected.values(), default=0) if rows is None else rows
        with self._lock:
            self._fence(load_id, attempt)
            for row in self._rows(load_id):
                row.update(expected=_json(expected), expected_rows=rows,
                           metrics=_json(metrics or {}), prepare_error=None, updated_at=self._clock())

    def record_audit(self, load_id: str, report: dict) -> bool:
        return self._set_while_prepared(load_id, "audit", report)

    def record_approval(self, load_id: str, approval: dict) -> bool:
        return self._set_while_prepared(load_id, "approval", approval)

    def _set_while_prepared(self, load_id: str, column: str, value: dict) -> bool:
        with self._lock:
            row = self._row(load_id)
            if row["state"] != State.PREPARED.value:
                return False
            row.update({column: _json(value), "updated_at": self._clock()})
            return True

    def quarantine(self, load_id: str, kept: list, reasons: list[str]) -> int:
        with self._lock:
            others = [k for k in self.quarantined.get(load_id, []) if k.reason not in reasons]
            self.quarantined[load_id] = others + list(kept)
            return len(kept)

    def record_outcomes(self, load_id: str, outcomes: dict) -> None:
        with self._lock:
            for row in self._rows(load_id):
                if row["state"] == State.COMMITTING.value:
                    row.update(outcomes=_json(outcomes), updated_at=self._clock())

    def commit_history(self, pipeline: str, participant: str, limit: int = 10) -> list[dict]:
        with self._lock:
            rows = [r for r in self._loads.values() if r["pipeline"] == pipeline and r["state"] ==
                    State.COMMITTED.value and participant in (_json(r["outcomes"]) or {})]
            rows.sort(key=lambda r: r["finished_at"], reverse=True)
            return [_json(r["outcomes"])[participant] for r in rows[:limit]]

    def last_committed(self, pipeline: str, other_than: str) -> Load | None:
        with self._lock:
            rows = [r for r in self._loads.values() if r["pipeline"] == pipeline
                    and r["state"] == State.COMMITTED.value and r["load_id"] != other_than]
            rows.sort(key=lambda r: r["finished_at"])
            return self._load(rows[-1]) if rows else None

    def mark_exposed(self, load_id: str) -> None:
        with self._lock:
            for row in self._rows(load_id):
                row.update(exposed_at=row.get("exposed_at") or self._clock(), updated_at=self._clock())

    def record_prepare_error(self, load_id: str, error: str, attempt: int | None = None) -> None:
        with self._lock:
            for row in self._rows(load_id):
                if attempt is None or row["prepare_attempt"] == attempt:
                    row.update(prepare_error=error[:4000], updated_at=self._clock())

    def record_vote(self, load_id: str, vote: Vote, attempt: int | None = None) -> None:
        with self._lock:
            self._row(load_id)  # the votes table references loads
            self._fence(load_id, attempt)
            self._votes.setdefault(load_id, {})[vote.participant] = _json(vote.to_json())

    def votes(self, load_id: str) -> dict[str, Vote]:
        with self._lock:
            return {name: Vote(**_json(v)) for name, v in self._votes.get(load_id, {}).items()}

    def votes_of(self, load_ids: list[str]) -> dict[str, dict[str, Vote]]:
        return {lid: self.votes(lid) for lid in load_ids}

    def history(self, load_id: str) -> list[Transition]:
        with self._lock:
            return list(self._transitions.get(load_id, []))

    def recent(self, limit: int = 20, pipeline: str | None = None) -> list[Load]:
        with self._lock:
            rows = [r for r in self._loads.values() if pipeline is None or r["pipeline"] == pipeline]
            return [self._load(r) for r in reversed(self._by_began(rows))][:limit]

    def unresolved(self, pipeline: str | None = None) -> list[Load]:
        with self._lock:
            return [self._load(r) for r in self._by_began(self._loads.values())
                    if State(r["state"]) not in states.TERMINAL and pipeline in (None, r["pipeline"])]

    def states_of(self, load_ids: Iterable[str]) -> dict[str, State]:
        with self._lock:
            return {lid: State(self._loads[lid]["state"]) for lid in load_ids if lid in self._loads}

    # -- helpers -------------------------------------------------------------------------
    def _row(self, load_id: str) -> dict:
        row = self._loads.get(load_id)
        if row is None:
            raise UnknownLoad(f"no load {load_id!r} in the transaction log")
        return row

    def _rows(self, load_id: str) -> list[dict]:
        """The load's row, or none: an UPDATE of a missing load changes nothing, silently."""
        return [self._loads[load_id]] if load_id in self._loads else []

    @staticmethod
    def _by_began(rows: Iterable[dict]) -> list[dict]:
        return sorted(rows, key=lambda r: r["began_at"])

    @staticmethod
    def _load(row: dict) -> Load:
        return Load.from_row({**row, **{k: _json(row[k]) for k in ("participants", "input", "expected", "metrics",
                                                                   "audit", "approval", "outcomes")}})
