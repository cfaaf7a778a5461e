"""An in-memory participant with fault knobs: the contract without servers, for tests.

- MemoryStore: the "server". Every MemoryParticipant built over the same store sees what
  an earlier instance staged, prepared, committed or aborted (the contract says every hook
  may run on a fresh instance). Process-local: writers find their store by its endpoint
  through a registry, so they pickle (as Spark would ship them) within one process.
- MemoryWriter: stages a partition attempt's rows under (load, target, part, attempt).
  Every attempt's rows stay staged, as a real failed task's output would; prepare keeps
  only the attempts Spark reported as successful, so a retried attempt leaves no duplicate.
- MemoryParticipant: prepare copies the winning attempts' rows aside (invisible), commit
  makes them visible, abort discards them; both idempotent, commit after abort and abort
  after commit FAILED. Faults (vote no, fail/retry/raise/crash at any hook, lose the
  prepared data) come from `Faults`.
- LocalFrame and LocalStage: the staging pass in-process (spark_stage.StagePartition's
  open/write/close/discard, one attempt per partition, a retried attempt when one fails),
  passed to coordinator.prepare(stage=...).
"""

from __future__ import annotations

import copy
import itertools
import pickle
import threading
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .. import ids
from ..errors import ServerUnreachable
from ..protocol.outcome import Kind, Outcome
from ..protocol.states import TERMINAL, State
from ..protocol.votes import Vote
from ..spark.stage import Staged, stage_partition
from ..spec import SpecError
from .contract import Participant, PartitionWriter, Staging, Swept

KIND = "memory"
HOOKS = ("stage", "open", "write", "close", "prepare", "ready", "commit", "abort", "clean_up", "decided",
         "claim_abort")
HOWS = ("retry", "fail", "down", "raise", "raise_after", "crash", "crash_after")

_STORES: "weakref.WeakValueDictionary[str, MemoryStore]" = weakref.WeakValueDictionary()


class MemoryFault(RuntimeError):
    """An injected unexpected error (how "raise" / "raise_after")."""


class MemoryUnreachable(ServerUnreachable):
    """An injected "server down" (how "down", and "retry" at hooks without an outcome)."""


class Crashed(BaseException):
    """An injected crash (how "crash" / "crash_after"): the process dies here, as under
    SIGKILL. A BaseException, so no `except Exception` of the code under test (outcome_of,
    record_prepare_error) sees it: nothing runs after it, as nothing would after a kill."""


@dataclass
class Faults:
    """What a participant does wrong. Shared by nothing: each instance gets its own, but
    `times` is counted in the store, so a fault that clears after N calls clears for the
    fresh instances of later steps too."""

    fail_at: dict[str, str] = field(default_factory=dict)
    """{hook: how}. Hooks: stage, open, write, close (the writer), prepare, ready, commit,
    abort, clean_up. Hows:
      "retry"        commit/abort return RETRY_LATER; other hooks raise MemoryUnreachable
      "fail"         commit/abort return FAILED (nothing done); ready votes no with a reason to
                     abort; clean_up returns what it left; other hooks raise MemoryFault
      "down"         raise MemoryUnreachable (a ServerUnreachable) before acting
      "raise"        raise MemoryFault before acting (an unexpected error)
      "raise_after"  act, then raise MemoryFault (the caller cannot know it acted)
      "crash"        raise Crashed before acting (the process dies here)
      "crash_after"  act, then raise Crashed (the process dies right after the effect)"""

    times: int | None = None
    """Each fault of fail_at fires on the first `times` calls of its hook for this
    participant and load (counted in the store), then clears; None: on every call."""

    vote_no: bool = False
    """prepare votes no (after preparing, as Postgres does: abort must still discard)."""

    lose_prepared: bool = False
    """The prepared data vanishes after ready, before commit, as an operator's
    ROLLBACK PREPARED would: ready passes, commit finds it neither prepared nor committed
    and returns FAILED. (MemoryStore.lose() drops it at any chosen moment instead.)"""

    over_budget: str = ""
    """What budget() says is over (a reason), or '' (the default: no budget)."""

    def __post_init__(self):
        for hook, how in self.fail_at.items():
            if hook not in HOOKS or how not in HOWS:
                raise ValueError(f"fault {hook}={how!r}: hooks are {HOOKS}, hows {HOWS}")


class MemoryStore:
    """The in-memory "server" participants and writers share (process-local).

    staged    {(load_id, target, part, attempt): [row dict, ...]}  every attempt's rows
    prepared  {(participant, load_id, attempt): {target: [row]}}   ready, invisible (per prepare attempt)
    committed {(participant, load_id): {target: [row, ...]}}        visible to readers
    aborted   {(participant, load_id)}                             abort done here
    held      {(participant, load_id)}                             what blocks others (none by the
                                                                   honest participant; tests' liars)
    decisions {(participant, load_id): "COMMIT" | "ABORT"}          a last resource's markers
    events    [(hook, participant, load_id)]                       every effect, in order
    """

    def __init__(self):
        self.endpoint = f"memory://{uuid.uuid4().hex[:12]}"
        self.staged: dict[tuple[str, str, int, str], list[dict]] = {}
        self.prepared: dict[tuple[str, str, int], dict[str, list[dict]]] = {}
        self.committed: dict[tuple[str, str], dict[str, list[dict]]] = {}
        self.aborted: set[tuple[str, str]] = set()
        self.held: set[tuple[str, str]] = set()
        self.decisions: dict[tuple[str, str], str] = {}
        self.events: list[tuple[str, str, str]] = []
        self.calls: dict[tuple[str, str, str], int] = {}
        self.lock = threading.RLock()
        _STORES[self.endpoint] = self

    @classmethod
    def at(cls, endpoint: str) -> "MemoryStore":
        try:
            return _STORES[endpoint]
        except KeyError:
            raise MemoryUnreachable(f"memory store {endpoint} is unreachable: not in this process") from None

    def lose(self, participant: str, load_id: str) -> bool:
        """Drop a prepared load outside the protocol (an operator's ROLLBACK PREPARED)."""
        with self.lock:
            keys = [k for k in self.prepared if k[:2] == (participant, load_id)]
            for key in keys:
                del self.prepared[key]
            return bool(keys)

    def is_prepared(self, participant: str, load_id: str) -> bool:
        """True if any prepare attempt of the load has prepared data here."""
        with self.lock:
            return any(k[:2] == (participant, load_id) for k in self.prepared)

    def order(self, hook: str, load_id: str) -> list[str]:
        """The participants whose `hook` acted on the load, in the order they did."""
        return [p for h, p, lid in self.events if h == hook and lid == load_id]

    def staged_rows(self, load_id: str) -> int:
        """Rows still staged for the load (every attempt, every target)."""
        return sum(len(rows) for (lid, *_), rows in self.staged.items() if lid == load_id)

    def _count(self, participant: str, load_id: str, hook: str) -> int:
        key = (participant, load_id, hook)
        with self.lock:
            self.calls[key] = self.calls.get(key, 0) + 1
            return self.calls[key]


class MemoryWriter(PartitionWriter):
    """Executor side: one partition attempt's rows of one target, into the store. Plain
    fields only (the store is found by endpoint), so it pickles like a real writer."""

    def __init__(self, endpoint: str, participant: str, load_id: str, target: str,
                 columns: list[str] | None, faults: Faults):
        self.endpoint, self.participant, self.load_id, self.target = endpoint, participant, load_id, target
        self.columns, self.faults = columns, faults
        self._key: tuple | None = None

    def open(self, partition: int, attempt: str) -> None:
        _fault(self, "open")
        self._key = (self.load_id, self.target, partition, attempt)
        self._rows = 0
        with self._store().lock:
            self._store().staged[self._key] = []
        _fault(self, "open", after=True)

    def write(self, batch) -> None:
        _fault(self, "write")
        rows = batch.to_pylist()
        if self.columns is not None:
            rows = [{c: r[c] for c in self.columns} for r in rows]
        with self._store().lock:
            self._store().staged[self._key].extend(rows)
        self._rows += len(rows)
        _fault(self, "write", after=True)

    def close(self) -> dict:
        _fault(self, "close")
        _fault(self, "close", after=True)
        return {"rows": self._rows}

    def discard(self) -> None:
        """Like a real failed attempt, what it wrote stays staged (prepare ignores it)."""

    def _store(self) -> MemoryStore:
        return MemoryStore.at(self.endpoint)


class MemoryParticipant(Participant):
    """One in-memory resource writing `targets`; see the module docstring."""

    kind = KIND
    can_commit_last = True

    def __init__(self, store: MemoryStore, load_id: str, targets: Iterable[str] = ("memory.rows",),
                 name: str = KIND, commit_may_fail: bool = False, faults: Faults | None = None,
                 columns: list[str] | None = None, attempt: int = 1, commits_last: str = ""):
        """`name`: its key in the load (votes, store). `targets`: the names it writes.
        `commit_may_fail`: this instance commits first (as a Kafka copy does). `faults`:
        what it does wrong (Faults). `columns`: the columns its targets take (stage refuses
        a frame without them; None: every column of the frame). `commits_last`: why it
        cannot prepare (what must_commit_last says; '' = it can)."""
        self.store, self.load_id, self.name, self.attempt = store, load_id, name, attempt
        self.targets = tuple(targets)
        self.commit_may_fail = commit_may_fail
        self.commits_last = commits_last
        self.faults = faults or Faults()
        self.columns = columns
        self.endpoint = store.endpoint

    @property
    def _key(self) -> tuple[str, str]:
        return (self.name, self.load_id)

    @property
    def _ready(self) -> tuple[str, str, int]:
        """This prepare attempt's key in `prepared`."""
        return (self.name, self.load_id, self.attempt)

    def _drop_prepared(self, upto: int | None = None) -> dict | None:
        """Drop the load's prepared data of attempts up to `upto` (all: None); this
        attempt's, if it had any."""
        mine = self.store.prepared.get(self._ready)
        for key in [k for k in self.store.prepared if k[:2] == self._key and (upto is None or k[2] <= upto)]:
            del self.store.prepared[key]
        return mine

    def stage(self, frames: Mapping[str, list[str]] | None = None) -> Staging:
        """Refuse a main frame ('') without this participant's columns (SpecError, nothing
        written); discard what earlier prepare attempts of this load prepared here (staged
        rows are keyed by Spark task attempt: prepare takes only the reported ones)."""
        _fault(self, "stage")
        columns = None if frames is None else frames.get("", [])
        missing = [c for c in self.columns or () if columns is not None and c not in columns]
        if missing:
            raise SpecError(f"the DataFrame lacks columns {self.name} needs: {missing}; it has {columns}")
        with self.store.lock:
            self._drop_prepared(upto=self.attempt)
        _fault(self, "stage", after=True)
        writers = {t: MemoryWriter(self.endpoint, self.name, self.load_id, t, self.columns, self.faults)
                   for t in self.targets}
        return Staging(writers, marks={"targets": list(self.targets)})

    def prepare(self, marks: dict, reports: Mapping[str, list[dict]], expected: Mapping[str, int]) -> Vote:
        """Set the winning attempts' rows aside (invisible); vote yes when every target has
        exactly Spark's rows. A reported attempt whose rows are gone: vote no."""
        _fault(self, "prepare")
        reasons, ready = [], {}
        with self.store.lock:
            for target in self.targets:
                rows = []
                for r in reports.get(target, []):
                    staged = self.store.staged.get((self.load_id, target, r["part"], r["attempt"]))
                    if staged is None:
                        reasons.append(f"{target}: attempt {r['attempt']} of partition {r['part']} was not staged")
                        continue
                    rows.extend(copy.deepcopy(staged))
                ready[target] = rows
                if len(rows) != expected.get(target):
                    reasons.append(f"{target}: prepared {len(rows)} rows but Spark staged {expected.get(target)}")
            self.store.prepared[self._ready] = ready
            self.store.events.append(("prepare", self.name, self.load_id))
        _fault(self, "prepare", after=True)
        if self.faults.vote_no:
            reasons.append("votes no (fault knob vote_no)")
        counts = {t: len(rows) for t, rows in ready.items()}
        total = sum(counts.values())
        summary = f"{self.endpoint}: {total} rows prepared for " + ", ".join(f"{t} ({n})" for t, n in counts.items())
        return Vote(self.name, not reasons, total, {"endpoint": self.endpoint, "targets": list(self.targets)},
                    "; ".join(reasons), counts, summary)

    def budget(self, vote: Vote, earlier: list[dict], staged_since) -> str:
        return self.faults.over_budget

    def ready(self, vote: Vote) -> Vote:
        """Holds nothing in between (as Kafka): checks the set-aside rows are still there."""
        if (problem := _fault(self, "ready")):
            return vote.no(problem)
        problem = "" if self._ready in self.store.prepared else (
            f"the prepared data of {self.name} for load {self.load_id} no longer exists")
        _fault(self, "ready", after=True)
        return vote.no(problem) if problem else vote

    def staged_rows(self, vote: Vote, target: str):
        import pyarrow as pa

        from ..audit.staged import ArrowRows

        with self.store.lock:
            rows = copy.deepcopy((self.store.prepared.get(self._ready) or {}).get(target, []))
        return ArrowRows(target, pa.Table.from_pylist(rows))

    def must_commit_last(self) -> str:
        return self.commits_last

    def decided(self) -> str | None:
        _fault(self, "decided")
        with self.store.lock:
            return self.store.decisions.get(self._key)

    def claim_abort(self) -> str:
        """The ABORT marker, unless the COMMIT one is there (one lock: the last resource's
        commit and this never interleave)."""
        _fault(self, "claim_abort")
        with self.store.lock:
            decision = self.store.decisions.setdefault(self._key, "ABORT")
        _fault(self, "claim_abort", after=True)
        return decision

    def commit(self, vote: Vote) -> Outcome:
        """DONE; ALREADY_DONE when committed before; FAILED when aborted here or when the
        prepared data is gone (lose_prepared, MemoryStore.lose). As the last resource, the
        commit and its COMMIT marker in one step; FAILED when the ABORT marker is there."""
        if (outcome := _fault(self, "commit")):
            return outcome
        with self.store.lock:
            if self.faults.lose_prepared and self._key not in self.store.committed:
                self.store.lose(*self._key)
            if self._key in self.store.committed:
                outcome = Outcome(self.name, Kind.ALREADY_DONE, counts=self._counts(self.store.committed),
                                  visible=self._visible())
            elif self._key in self.store.aborted or self.store.decisions.get(self._key) == "ABORT":
                outcome = Outcome(self.name, Kind.FAILED, f"load {self.load_id} was aborted in {self.name}; "
                                  "it cannot be committed")
            elif self._ready not in self.store.prepared:
                outcome = Outcome(self.name, Kind.FAILED, f"the prepared data of {self.name} for load "
                                  f"{self.load_id} no longer exists and was not committed: it is lost")
            else:
                self.store.committed[self._key] = self._drop_prepared()
                if self.last_resource:
                    self.store.decisions[self._key] = "COMMIT"
                self.store.events.append(("commit", self.name, self.load_id))
                outcome = Outcome(self.name, Kind.DONE, counts=self._counts(self.store.committed),
                                  visible=self._visible())
        _fault(self, "commit", after=True)
        return outcome

    def abort(self, vote: Vote | None) -> Outcome:
        """Discard staged and prepared rows: DONE the first time (or when something was
        left to discard), ALREADY_DONE on a repeat; FAILED when the load is committed here."""
        if (outcome := _fault(self, "abort")):
            return outcome
        with self.store.lock:
            if self.last_resource:
                self.store.decisions.setdefault(self._key, "ABORT")
            if self._key in self.store.committed:
                outcome = Outcome(self.name, Kind.FAILED, f"load {self.load_id} is already committed in "
                                  f"{self.name}; it cannot be rolled back")
            else:
                prepared = self._drop_prepared()
                staged = self._drop_staged()
                first = self._key not in self.store.aborted
                self.store.aborted.add(self._key)
                self.store.events.append(("abort", self.name, self.load_id))
                counts = {"prepared_rows_discarded": sum(map(len, (prepared or {}).values())),
                          "staged_rows_dropped": staged}
                kind = Kind.DONE if first or prepared is not None or staged else Kind.ALREADY_DONE
                outcome = Outcome(self.name, kind, counts=counts)
        _fault(self, "abort", after=True)
        return outcome

    def discard(self) -> str:
        """A superseded attempt: drop its own prepared data only."""
        with self.store.lock:
            self.store.prepared.pop(self._ready, None)
        return ""

    def clean_up(self, vote: Vote) -> str:
        if (left := _fault(self, "clean_up")):
            return left
        with self.store.lock:
            self._drop_staged()
        _fault(self, "clean_up", after=True)
        return ""

    def visible(self, load_ids: list[str]) -> dict[str, dict[str, int]]:
        with self.store.lock:
            return {lid: {t: len(self.store.committed.get((self.name, lid), {}).get(t, [])) for t in self.targets}
                    for lid in load_ids}

    @classmethod
    def sweep(cls, endpoint: str, state_of: Callable[[set[str]], Mapping[str, Any]],
              pipeline: str | None = None) -> list[Swept]:
        """Prepared data of loads unknown, ABORTED or COMMITTED (a superseded attempt's) is
        discarded; staged rows of loads unknown or ended are dropped (a VIOLATED load's
        prepared data is left for the operator). Only `pipeline`'s loads, when given."""
        store = MemoryStore.at(endpoint)
        with store.lock:
            load_ids = {lid for lid in {k[0] for k in store.staged} | {lid for _, lid, _ in store.prepared}
                        if ids.of_pipeline(lid, pipeline)}
            states = state_of(load_ids)
            swept = []
            for (name, lid, attempt) in list(store.prepared):
                if lid in load_ids and states.get(lid) in (None, State.ABORTED, State.COMMITTED):
                    del store.prepared[(name, lid, attempt)]
                    swept.append(Swept(lid, "orphan prepared data discarded", f"{name}; load {states.get(lid)}"))
            for lid in sorted({k[0] for k in store.staged} & load_ids):
                if states.get(lid) is None or states[lid] in TERMINAL:
                    rows = 0
                    for key in [k for k in store.staged if k[0] == lid]:
                        rows += len(store.staged.pop(key))
                    swept.append(Swept(lid, "orphan staging dropped", f"{rows} rows; load {states.get(lid)}"))
        return swept

    def _counts(self, where: dict) -> dict[str, int]:
        return {t: len(rows) for t, rows in where.get(self._key, {}).items()}

    def _visible(self) -> dict[str, int]:
        """Per target, the load's committed rows."""
        committed = self.store.committed.get(self._key, {})
        return {t: len(committed.get(t, [])) for t in self.targets}

    def _drop_staged(self) -> int:
        rows = 0
        for key in [k for k in self.store.staged if k[0] == self.load_id and k[1] in self.targets]:
            rows += len(self.store.staged.pop(key))
        return rows


def _fault(obj, hook: str, after: bool = False):
    """Fire the fault configured for `hook` (called before acting, and `after` it).
    Returns what the hook returns instead (an Outcome, ready's or clean_up's reason),
    or None to go on."""
    how = obj.faults.fail_at.get(hook)
    if how is None:
        return None
    writer = isinstance(obj, MemoryWriter)
    store, name = (obj._store(), obj.participant) if writer else (obj.store, obj.name)
    calls = store._count(name, obj.load_id, hook) if not after else store.calls[(name, obj.load_id, hook)]
    if after != how.endswith("_after") or (obj.faults.times is not None and calls > obj.faults.times):
        return None
    what = f"{hook} of {name} for load {obj.load_id} (fault knob {hook}={how})"
    if how in ("crash", "crash_after"):
        raise Crashed(what)
    if how in ("raise", "raise_after"):
        raise MemoryFault(what)
    if how == "down" or (how == "retry" and hook not in ("commit", "abort")):
        raise MemoryUnreachable(f"memory store {store.endpoint} is unreachable: {what}")
    if hook in ("commit", "abort"):
        return Outcome(name, Kind.RETRY_LATER if how == "retry" else Kind.FAILED, what)
    if hook in ("ready", "clean_up"):
        return what
    raise MemoryFault(what)


# -- the staging pass, in-process -------------------------------------------------------------


class LocalFrame:
    """A "DataFrame" for LocalStage: {partition: [pyarrow.RecordBatch, ...]}, with
    `.columns` as coordinator.prepare reads them."""

    def __init__(self, partitions: Mapping[int, list]):
        self.partitions = dict(partitions)
        schemas = [b.schema for batches in self.partitions.values() for b in batches]
        self.columns = list(schemas[0].names) if schemas else []

    @classmethod
    def of_rows(cls, rows: list[dict], partitions: int = 3, batch_rows: int = 2) -> "LocalFrame":
        """Rows dealt round-robin into `partitions`, each cut into batches of `batch_rows`."""
        import pyarrow as pa

        parts: dict[int, list] = {p: [] for p in range(partitions)}
        for p in range(partitions):
            mine = rows[p::partitions]
            for i in range(0, len(mine), batch_rows):
                parts[p].append(pa.RecordBatch.from_pylist(mine[i:i + batch_rows]))
        return cls(parts)

    @property
    def rows(self) -> int:
        return sum(b.num_rows for batches in self.partitions.values() for b in batches)


class _AttemptDied(Exception):
    """LocalStage killed a partition's attempt on purpose (crash_midway, crash_staged)."""


@dataclass
class LocalStage:
    """coordinator.prepare's `stage`: spark_stage.stage in-process, over a LocalFrame.

    Each partition runs spark_stage.stage_partition, as StagePartition does (open every writer with a fresh
    attempt id, write each non-empty batch to all, close all, discard all on failure), on
    writers unpickled afresh per attempt, as Spark ships them to each task. A failed
    attempt is retried, up to `max_attempts` (Spark's task.maxFailures), then the error
    is raised. Only successful attempts report.

    `crash_midway`: partitions whose first attempt dies after its first batch (failpoint
    spark.partition_midway). `crash_staged`: partitions whose first attempt closes every
    writer and then dies before reporting (spark.partition_staged): its rows are all
    staged, and only the retry's must count. `attempts`: (part, attempt, "ok" or why it
    failed), appended as they run."""

    crash_midway: frozenset[int] = frozenset()
    crash_staged: frozenset[int] = frozenset()
    max_attempts: int = 4
    attempts: list[tuple[int, str, str]] = field(default_factory=list)

    def __call__(self, df, stagings: dict[str, Staging]) -> Staged:
        """`df`: a LocalFrame, or {frame name: LocalFrame} (each streamed once to the
        writers of the targets it feeds, as spark_stage.stage does)."""
        if any(s.columns for s in stagings.values()):
            raise NotImplementedError("LocalStage cannot compute Spark SQL columns (Staging.columns)")
        frames = df if isinstance(df, dict) else {"": df}
        expected: dict[str, int] = {}
        reports: dict[str, dict[str, list[dict]]] = {p: {t: [] for t in s.writers} for p, s in stagings.items()}
        for name, frame in frames.items():
            writers = [(participant, target, writer) for participant, staging in stagings.items()
                       for target, writer in staging.writers.items() if staging.frame_of(target) == name]
            if writers:
                self._stage_frame(frame, writers, expected, reports)
        return Staged(expected, reports)

    def _stage_frame(self, df: LocalFrame, writers, expected: dict, reports: dict) -> None:
        shipped = pickle.dumps([w for _, _, w in writers])
        expected.update({target: 0 for _, target, _ in writers})
        for part, batches in sorted(df.partitions.items()):
            for n in itertools.count(1):
                attempt = uuid.uuid4().hex[:16]
                try:
                    rows, done = self._attempt(pickle.loads(shipped), part, attempt, batches, first=n == 1)
                except Exception as exc:
                    self.attempts.append((part, attempt, f"failed: {exc}"))
                    if n >= self.max_attempts:
                        raise
                    continue
                self.attempts.append((part, attempt, "ok"))
                for (participant, target, _), report in zip(writers, done):
                    expected[target] += rows
                    reports[participant][target].append({"part": part, "attempt": attempt, **report})
                break

    def _attempt(self, writers: list[PartitionWriter], part: int, attempt: str, batches, first: bool):
        def midway() -> None:
            if first and part in self.crash_midway:
                raise _AttemptDied(f"partition {part}: attempt {attempt} died after its first batch")

        rows, reports = stage_partition(writers, part, attempt, batches, midway)
        if first and part in self.crash_staged:
            raise _AttemptDied(f"partition {part}: attempt {attempt} staged everything, died before reporting")
        return rows, reports
