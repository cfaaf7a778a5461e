"""The transaction log in memory: the contract's rules (log/contract.py) over dicts, without
a server, for serverless tests of the coordinator and recovery.

Rows are dicts shaped like `twophase.loads`, and every read builds a fresh Load (JSON
columns copied through JSON, as jsonb would), so a caller can never change the log by
mutating what it got. One lock stands for Postgres' row locks and transactions
(process-local); a rule's changes are kept aside and applied when it returns, none when it
raises, as a rolled-back transaction.

Known differences: timestamps come from `clock` (default: now, UTC), and a naive ISO
timestamp of a data interval is read as UTC (Postgres reads it in the session's zone);
rows with the same began_at keep insertion order (Postgres: unspecified).
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Iterator

from ..gates.quarantine import Kept
from ..protocol import states
from ..protocol.states import State
from ..protocol.votes import Vote
from ..spec import LoadSpec
from .conflicts import UnknownLoad
from .contract import NOW, Locked, TransactionLog
from .records import Load, Skip, Transition
from .schema import MIGRATIONS


def _json(value):
    return json.loads(json.dumps(value))


def _timestamp(iso: str | None) -> datetime | None:
    if iso is None:
        return None
    at = datetime.fromisoformat(str(iso))
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


class _HeldRow(Locked):
    """A load's row while the log's lock is held: changes kept aside until apply()."""

    def __init__(self, log: "MemoryLog", load_id: str, now: datetime):
        self.log, self.load_id, self.now = log, load_id, now
        self.row = _json_row(log._row(load_id))
        self.changes: dict = {}
        self.moves: list[Transition] = []
        self.votes: dict[str, dict] | None = None  # the load's votes after this transaction, when changed

    def set(self, **columns) -> None:
        self.changes.update({c: self.now if v is NOW else _json(v) if isinstance(v, (dict, list)) else v
                             for c, v in columns.items()}, updated_at=self.now)

    def add_transition(self, from_state: State, to_state: State, reason: str | None) -> None:
        self.moves.append(Transition(from_state.value, to_state.value, reason, self.now))

    def drop_votes(self) -> None:
        self.votes = {}

    def put_vote(self, vote: Vote) -> None:
        if self.votes is None:
            self.votes = dict(self.log._votes.get(self.load_id, {}))
        self.votes[vote.participant] = _json(vote.to_json())

    def apply(self) -> None:
        self.log._loads[self.load_id].update(self.changes)
        self.log._transitions[self.load_id].extend(self.moves)
        if self.votes is not None:
            self.log._votes[self.load_id] = self.votes


def _json_row(row: dict) -> dict:
    return {k: _json(v) if isinstance(v, (dict, list)) else v for k, v in row.items()}


class MemoryLog(TransactionLog):
    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self._clock = clock
        self._loads: dict[str, dict] = {}
        self._votes: dict[str, dict[str, dict]] = {}
        self._transitions: dict[str, list[Transition]] = {}
        self._lock = threading.RLock()
        self._skips: dict[str, list[Skip]] = {}  # source key -> its skips, oldest first
        self._quarantine: dict[str, list[Kept]] = {}  # load id -> its kept entries

    @contextmanager
    def _locked(self, load_id: str) -> Iterator[Locked]:
        with self._lock:
            held = _HeldRow(self, load_id, self._clock())
            yield held
            held.apply()

    def ensure_schema(self) -> int:
        return len(MIGRATIONS)

    def begin(self, spec: LoadSpec, plan: Callable[[list[Load]], LoadSpec] | None = None,
              fix: Callable[[LoadSpec, list[Load]], LoadSpec] | None = None) -> tuple[Load, bool]:
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
            key = spec.source.key if spec.source is not None else None
            if fix is not None and key is not None:
                spec = fix(spec, [x for x in self.of_source(key) if x.load_id != spec.load_id])
            now = self._clock()
            self._loads[spec.load_id] = dict(
                load_id=spec.load_id, pipeline=spec.pipeline, run_id=spec.run_id, state=State.PREPARING.value,
                decision=None, reason=None, participants=_json(spec.to_log()), input=_json(spec.input),
                expected_rows=None, expected=None, metrics={}, prepare_error=None,
                data_interval_start=start, data_interval_end=_timestamp(interval[1]),
                began_at=now, prepared_at=None, decided_at=None, finished_at=None, updated_at=now,
                prepare_attempt=0, exposed_at=None, audit=None, approval=None, outcomes=None,
                driver=None, driver_until=None, source=key, source_range=_json(spec.source_range))
            self._transitions[spec.load_id] = [Transition(None, State.PREPARING.value, None, now)]
            return self.get(spec.load_id), True

    def get(self, load_id: str) -> Load:
        with self._lock:
            return self._load(self._row(load_id))

    def quarantine(self, load_id: str, kept: list, reasons: list[str] | None = None) -> int:
        with self._lock:
            others = [k for k in self._quarantine.get(load_id, []) if reasons is not None and k.reason not in reasons]
            self._quarantine[load_id] = others + [replace(k, kept_at=self._clock()) for k in kept]
            return len(kept)

    def quarantined(self, load_id: str, limit: int | None = None) -> list[Kept]:
        with self._lock:
            return sorted(self._quarantine.get(load_id, []), key=lambda k: k.reason)[:limit]

    def sweep_quarantine(self, older_than: timedelta, pipeline: str | None = None) -> int:
        with self._lock:
            deleted, cutoff = 0, self._clock() - older_than
            for load_id, kept in self._quarantine.items():
                if pipeline is None or load_id.startswith(pipeline + "."):
                    left = [k for k in kept if k.kept_at >= cutoff]
                    deleted += len(kept) - len(left)
                    self._quarantine[load_id] = left
            return deleted

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

    def skip(self, source: str, decide, by: str, why: str) -> Skip:
        with self._lock:
            skipped = decide(self.of_source(source), self.skips(source))
            done = Skip(source, _json(skipped), by, why, self._clock())
            self._skips.setdefault(source, []).append(done)
            return done

    def skips(self, source: str) -> list[Skip]:
        with self._lock:
            return list(self._skips.get(source, []))

    def of_source(self, source: str) -> list[Load]:
        with self._lock:
            return [self._load(r) for r in self._by_began(r for r in self._loads.values() if r["source"] == source)]

    def states_of(self, load_ids: Iterable[str]) -> dict[str, State]:
        with self._lock:
            return {lid: State(self._loads[lid]["state"]) for lid in load_ids if lid in self._loads}

    # -- helpers -------------------------------------------------------------------------
    def _row(self, load_id: str) -> dict:
        row = self._loads.get(load_id)
        if row is None:
            raise UnknownLoad(f"no load {load_id!r} in the transaction log")
        return row

    @staticmethod
    def _by_began(rows: Iterable[dict]) -> list[dict]:
        return sorted(rows, key=lambda r: r["began_at"])

    @staticmethod
    def _load(row: dict) -> Load:
        return Load.from_row({**row, **{k: _json(row[k]) for k in ("participants", "input", "expected", "metrics",
                                                                   "audit", "approval", "outcomes")}})
