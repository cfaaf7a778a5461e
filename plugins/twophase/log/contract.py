"""The transaction log's contract: what every log offers (an abstract class), with the
rules that change a load written once, here.

A log keeps loads (one row each: state, decision, reason, phase timestamps, planned
participants...), their votes and the history of their states. An implementation
(PostgresLog, schema `twophase`; MemoryLog, for serverless tests) stores and reads; the
rules are the methods of this class that change a load: which state may follow which
(states.TRANSITIONS), which prepare attempt may still write, what may change while a load
is PREPARED or COMMITTING. Each runs as one transaction on the load's row, under the
log's lock (`_locked`): it reads the row, decides, and its changes are written together
when it returns, none of them when it raises. tests/log checks every implementation
against one suite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime, timedelta
from typing import Callable, ContextManager, Iterable

from ..protocol import states
from ..protocol.states import DECISION_OF, PHASE_2, TIMESTAMP_OF, State
from ..protocol.votes import Vote
from ..spec import LoadSpec
from .conflicts import DriverBusy, LeaseLost, StateConflict, Superseded
from .records import Load, Skip, Transition

NOW = object()  # a column's value in Locked.set: the time of the log's transaction


class Locked(ABC):
    """One load's row, locked for a rule's transaction: `row` (its columns as read under
    the lock), `now` (the transaction's time); what the rule changes is written when the
    transaction commits."""

    row: dict
    now: datetime

    @abstractmethod
    def set(self, **columns) -> None:
        """Change columns of the load's row (NOW: the transaction's time); updated_at too."""

    @abstractmethod
    def add_transition(self, from_state: State, to_state: State, reason: str | None) -> None:
        """Add a row to the load's history."""

    @abstractmethod
    def drop_votes(self) -> None:
        """Delete every vote of the load."""

    @abstractmethod
    def put_vote(self, vote: Vote) -> None:
        """Store the participant's vote, in place of its earlier one."""


class TransactionLog(ABC):
    """The coordinator's durable log. See the module docstring."""

    # -- storage: each implementation's own -------------------------------------------------
    @abstractmethod
    def _locked(self, load_id: str) -> ContextManager[Locked]:
        """A transaction on the load's row, locked against every other rule's until it ends:
        committed when the block returns, rolled back when it raises. UnknownLoad when the
        log has no such load."""

    @abstractmethod
    def ensure_schema(self) -> int:
        """Create or upgrade the log's storage, idempotently; its schema version."""

    @abstractmethod
    def begin(self, spec: LoadSpec, plan: Callable[[list[Load]], LoadSpec] | None = None,
              fix: Callable[[LoadSpec, list[Load]], LoadSpec] | None = None) -> tuple[Load, bool]:
        """Write the load's row in state PREPARING, before anything is staged.

        Idempotent: a retried begin finds the row and returns it with created=False.
        For a new load with a data interval, `plan` is called with the pipeline's other
        loads of the same interval (oldest first), under a lock that serializes begins of
        that interval; it returns the spec to log, or raises to refuse the load (nothing is
        written). Then, for a new load with a source, `fix` is called with the spec so far
        (as `plan` returned it) and the other loads of the same source (its key; any
        pipeline; oldest first) under a lock that serializes begins of that source; it
        returns the spec to log with the range it reads (`source_range`), or raises to
        refuse the load."""

    @abstractmethod
    def skip(self, source: str, decide: Callable[[list[Load], list[Skip]], dict], by: str, why: str) -> Skip:
        """Record an operator's skip of the source's records that no load can read (see
        Skip). `decide` is called with the source's loads and earlier skips (oldest first)
        under the lock that serializes the source's begins; it returns the skipped range
        (sources.Range as JSON), or raises to record nothing."""

    @abstractmethod
    def skips(self, source: str) -> list[Skip]:
        """The source's skips, oldest first."""

    @abstractmethod
    def get(self, load_id: str) -> Load:
        """The load; UnknownLoad when the log has none of that id."""

    @abstractmethod
    def votes(self, load_id: str) -> dict[str, Vote]:
        """The load's votes by participant ({} when none, or no such load)."""

    @abstractmethod
    def votes_of(self, load_ids: list[str]) -> dict[str, dict[str, Vote]]:
        """The votes of many loads at once: {load_id: {participant: Vote}}, every id present."""

    @abstractmethod
    def history(self, load_id: str) -> list[Transition]:
        """The load's state changes, oldest first (its creation: from None to PREPARING)."""

    @abstractmethod
    def recent(self, limit: int = 20, pipeline: str | None = None) -> list[Load]:
        """The newest loads first (of one pipeline, when given)."""

    @abstractmethod
    def unresolved(self, pipeline: str | None = None) -> list[Load]:
        """Loads not yet in a terminal state (of one pipeline, when given), oldest first."""

    @abstractmethod
    def of_source(self, source: str) -> list[Load]:
        """The loads of one source (its key), oldest first."""

    @abstractmethod
    def states_of(self, load_ids: Iterable[str]) -> dict[str, State]:
        """The state of each load the log knows among `load_ids` (unknown ones absent)."""

    @abstractmethod
    def commit_history(self, pipeline: str, participant: str, limit: int = 10) -> list[dict]:
        """The participant's commit outcomes in the pipeline's last `limit` committed loads
        that recorded one, newest first."""

    @abstractmethod
    def last_committed(self, pipeline: str, other_than: str) -> Load | None:
        """The pipeline's most recently committed load other than `other_than`."""

    @abstractmethod
    def quarantine(self, load_id: str, kept: list, reasons: list[str] | None = None) -> int:
        """Keep `kept` (quarantine.Kept) for the load, in place of all its entries (a retried
        prepare keeps them once) or of its entries of `reasons` (a retried audit); how many
        were kept."""

    @abstractmethod
    def quarantined(self, load_id: str, limit: int | None = None) -> list:
        """The load's kept lines (quarantine.Kept, with kept_at), by reason, in the order
        they were kept; at most `limit`."""

    @abstractmethod
    def sweep_quarantine(self, older_than: timedelta, pipeline: str | None = None) -> int:
        """Delete entries kept longer ago than `older_than` (only those of `pipeline`'s
        loads, whose ids begin with its name and a dot, when given); how many."""

    # -- rules: written once ------------------------------------------------------------------
    def transition(self, load_id: str, to: State, *, expect: Iterable[State] | None = None,
                   reason: str | None = None, attempt: int | None = None,
                   driver: str | None = None) -> tuple[Load, bool]:
        """Move a load to state `to`: the only way a state changes.

        - `attempt` given (a prepare attempt moving its load to PREPARED) and a later
          attempt claimed the load: Superseded;
        - `driver` given (a phase-2 step) and another driver holds the load now: LeaseLost;
          a terminal state ends the driver's lease;
        - already in `to`: nothing changes, returns (load, False), so retries are harmless;
        - current state not in `expect` (when given): StateConflict;
        - move not in the transition table: states.IllegalTransition;
        - otherwise the state, the decision when `to` is COMMITTING or ABORTING, the
          reason when given, the phase's timestamp and a history row, in one transaction.
        """
        with self._locked(load_id) as locked:
            current = State(locked.row["state"])
            if attempt is not None and locked.row["prepare_attempt"] != attempt:
                raise Superseded(load_id, attempt, locked.row["prepare_attempt"], current)
            if driver is not None and locked.row["driver"] != driver:
                raise LeaseLost(load_id, driver, locked.row["driver"], current)
            changed = current != to
            if changed:
                if expect is not None and current not in set(expect):
                    raise StateConflict(load_id, current, expect)
                states.check(load_id, current, to)
                columns = {"state": to.value}
                if to in DECISION_OF:
                    columns["decision"] = DECISION_OF[to].value
                if reason is not None:
                    columns["reason"] = reason
                if to in TIMESTAMP_OF:
                    columns[TIMESTAMP_OF[to]] = NOW
                if to in states.TERMINAL:
                    columns.update(driver=None, driver_until=None)
                locked.set(**columns)
                locked.add_transition(current, to, reason)
        return self.get(load_id), changed

    def claim_prepare(self, load_id: str) -> int:
        """Start a prepare attempt: the load (PREPARING) gets the next attempt number, and
        votes and errors of earlier attempts are dropped; returns the number. From now on
        only this attempt may record votes or move the load to PREPARED (Superseded for the
        others). Not PREPARING: StateConflict."""
        with self._locked(load_id) as locked:
            if locked.row["state"] != State.PREPARING.value:
                raise StateConflict(load_id, State(locked.row["state"]), [State.PREPARING])
            attempt = locked.row["prepare_attempt"] + 1
            locked.set(prepare_attempt=attempt, prepare_error=None)
            locked.drop_votes()
            return attempt

    def set_expected(self, load_id: str, expected: dict[str, int], metrics: dict | None = None,
                     rows: int | None = None, attempt: int | None = None) -> None:
        """Spark's row count per target of the load, and the job's own figures (input
        lines, rejects...). `rows`: the load's row count the quality rules judge (its
        first target's; default the largest). `attempt`: fenced (Superseded)."""
        with self._locked(load_id) as locked:
            _fence(locked, load_id, attempt)
            locked.set(expected=dict(expected), expected_rows=max(expected.values(), default=0) if rows is None
                       else rows, metrics=dict(metrics or {}), prepare_error=None)

    def record_vote(self, load_id: str, vote: Vote, attempt: int | None = None) -> None:
        """Store (or replace) a participant's vote; `attempt`: fenced (Superseded)."""
        with self._locked(load_id) as locked:
            _fence(locked, load_id, attempt)
            locked.put_vote(vote)

    def record_prepare_error(self, load_id: str, error: str, attempt: int | None = None) -> None:
        """Why the prepare job failed, for the vote's reason and the rollback's log; an
        attempt's error only while it is the latest (a superseded one's is not the load's)."""
        with self._locked(load_id) as locked:
            if attempt is None or locked.row["prepare_attempt"] == attempt:
                locked.set(prepare_error=error[:4000])

    def record_audit(self, load_id: str, report: dict) -> bool:
        """Store the audit's report while the load is PREPARED (before its decision);
        False when it was decided meanwhile (the report is then not the load's)."""
        return self._set_while(load_id, State.PREPARED, audit=report)

    def record_approval(self, load_id: str, approval: dict) -> bool:
        """Store the load's approval (asked, then answered) while it is PREPARED; False
        when it was decided meanwhile (recovery presumed it abandoned)."""
        return self._set_while(load_id, State.PREPARED, approval=approval)

    def record_outcomes(self, load_id: str, outcomes: dict) -> bool:
        """Each participant's commit outcome ({kind, seconds, count}), kept while the load
        is COMMITTING, right before it is logged COMMITTED; False when it is not."""
        return self._set_while(load_id, State.COMMITTING, outcomes=outcomes)

    def mark_exposed(self, load_id: str) -> None:
        """The vote starts making the load's participants ready: its exposure window (what
        it holds on targets until phase 2 ends) starts now, unless an earlier vote started it."""
        with self._locked(load_id) as locked:
            locked.set(exposed_at=locked.row["exposed_at"] or NOW)

    def claim_driver(self, load_id: str, driver: str, lease: timedelta, dead: str | None = None) -> Load:
        """Become the one driver of the load's phase 2 (COMMITTING or ABORTING) for `lease`:
        a compare-and-set on the load's driver. DriverBusy while another driver's lease
        lasts, unless that driver is `dead` (the caller knows its process is gone); an
        ended lease is taken over (its driver died, or stalled past it: its next change
        raises LeaseLost). Claiming again extends one's own lease. Another state:
        StateConflict."""
        with self._locked(load_id) as locked:
            row, current = locked.row, State(locked.row["state"])
            if current not in PHASE_2:
                raise StateConflict(load_id, current, PHASE_2)
            holder = row["driver"]
            if holder not in (None, driver, dead) and row["driver_until"] > locked.now:
                raise DriverBusy(load_id, holder, row["driver_until"])
            locked.set(driver=driver, driver_until=locked.now + lease)
        return self.get(load_id)

    def renew_driver(self, load_id: str, driver: str, lease: timedelta) -> bool:
        """Extend the driver's lease to `lease` from now; False when it no longer holds it."""
        with self._locked(load_id) as locked:
            if locked.row["driver"] != driver:
                return False
            locked.set(driver_until=locked.now + lease)
            return True

    def release_driver(self, load_id: str, driver: str) -> None:
        """End the driver's lease now (its step ended), if it still holds it."""
        with self._locked(load_id) as locked:
            if locked.row["driver"] == driver:
                locked.set(driver=None, driver_until=None)

    def _set_while(self, load_id: str, state: State, **columns) -> bool:
        with self._locked(load_id) as locked:
            if locked.row["state"] != state.value:
                return False
            locked.set(**columns)
            return True


def _fence(locked: Locked, load_id: str, attempt: int | None) -> None:
    """Superseded unless `attempt` (when given) is the latest and the load still PREPARING."""
    row = locked.row
    if attempt is not None and (row["prepare_attempt"] != attempt or row["state"] != State.PREPARING.value):
        raise Superseded(load_id, attempt, row["prepare_attempt"], State(row["state"]))
