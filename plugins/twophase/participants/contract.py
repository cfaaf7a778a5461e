"""The participant contract: what a resource implements to take part in an atomic load.

A *participant* is one transactional resource of a load, with one vote: a Postgres
database (one prepared transaction), a Kafka cluster (one copy transaction), an
in-memory store for tests. It writes one or more *targets* of its kind (tables, topics),
each named uniquely in the load. The coordinator drives every participant through the
same hooks and never looks inside their data:

    begin       must_commit_last()        why it cannot prepare and must commit last, or ''
    driver      stage(frames)             make staging; returns writers for the executors
    executors   PartitionWriter           open(partition, attempt) / write(batch)* / close()
    driver      prepare(marks, reports)   check what was staged, holding nothing; vote
    driver      discard()                 a superseded prepare attempt drops its own staging
    vote task   budget(vote, earlier, since) why the commit would not fit the participant's
                                          settings (a copy longer than its transaction
                                          timeout, staging expiring first), or ''
    audit task  staged_rows(vote, target) the audit's read-only view of a target's staged rows
    vote task   ready(vote) -> Vote       right before the decision: make the load ready to
                                          commit (take what commit needs: a prepared
                                          transaction) and check the staging is still whole
    vote task   commit(vote) of the load's last resource, after every other is ready: the
                decision; decided() first, claim_abort() before any ABORT is decided
    phase 2     commit(vote) | abort(vote or None), then clean_up(vote); before commit,
                carry_source(source, range, address): a source position to commit with it
    any time    visible(load_ids)         what real readers see of the loads (verify, tests)
    recovery    sweep(endpoint, state_of) this kind's orphans: staging of ended or unknown loads

Rules every implementation keeps (the contract suite, tests/contract, checks them):

- Nothing survives between hooks but the vote, which the coordinator logs durably. Every
  hook may run on a fresh instance built from the same description, in another process,
  hours later: commit and abort find what they need in the vote (`committable`) or in
  names derived from the load id.
- Staging is per prepare attempt (`attempt`, 1, 2... as the log hands them out): two
  attempts of one load may run at once (a retry while a zombie Spark application of the
  first still runs), and neither may touch what the other staged. A later attempt may
  discard what earlier ones left; commit and abort act on the attempt that voted (the
  load's) and may discard earlier ones; `discard` drops only its own attempt's.
- Every hook is idempotent. A repeated commit returns ALREADY_DONE, a repeated abort
  DONE or ALREADY_DONE, never a second effect.
- Nothing is visible to readers before commit; after abort nothing of the load ever is.
- prepare holds nothing on a target (no lock, no open or prepared transaction): a load
  may wait long between prepare and the vote (an audit, a person's approval). Only
  ready() takes what commit needs, and the exposure window (the log's `exposed_at` to the
  commit's end) is ready() plus phase 2. ready() is repeatable (a retried vote runs it
  again) and votes no, naming it, when staging was lost while the load waited (a crash
  restart empties unlogged tables, retention deletes staged records).
- A vote is the participant's own (`participant` is its name) and a yes vote counts exactly
  its targets (`counts`, one per target, adding up to `count`). The coordinator checks both,
  and each target's count against the rows Spark computed, on the vote of prepare and again
  on the vote ready returns (voting.claim_problems): a vote that fails is a reason to abort,
  and one under another participant's name is logged as this participant's no
  (voting.owned), never in the other's place.
- commit after abort, and abort after commit, return FAILED naming why; they never act.
- A commit that is DONE or ALREADY_DONE says what readers see of the load, per target
  (`Outcome.visible`), read from the target where it can be (a snapshot's summary, the
  copy's own count) or from what the participant itself checked when it made the load
  ready. The coordinator compares it with the vote (voting.commit_problems): other rows
  than voted, or a target left unsaid, end the load VIOLATED, naming them.
- commit and abort return an Outcome on every branch they know. An exception they did not
  expect is mapped to an outcome in one place (`outcome_of`), never escapes raw.
- `commit_may_fail` says whether a commit can still fail for good after a yes vote (a
  Kafka copy can: its staged records expired, the topic was deleted). The coordinator
  commits those participants first, the likeliest to fail (`commit_risk`) first of all
  (docs/adr/0001-commit-order.md).

A participant that cannot prepare (a Postgres server with max_prepared_transactions = 0)
may still join a load as its *last resource* (docs/adr/0011), if its kind can
(`can_commit_last`) and no other participant of the load must: begin asks each
(`must_commit_last`) and records the one in the load; `last_resource` is then set on every
instance of it. Its commit is one local transaction that makes the load visible and writes
a marker of the decision in the same place, and the vote runs it after every other
participant is ready: that commit *is* the load's decision. So:

- commit writes the COMMIT marker with the data, atomically; it is ALREADY_DONE when the
  marker says COMMIT, and FAILED (nothing visible) when it says ABORT;
- `claim_abort` writes the ABORT marker unless COMMIT is there, and returns the decision
  that stands; every path that decides ABORT after the load was PREPARED calls it first,
  and abort calls it too, so ABORT and COMMIT can never both be recorded;
- `decided` reads the marker: the vote asks it before anything else, as an earlier vote
  may have committed the last resource and died before logging the decision.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Callable, ClassVar, Mapping

from ..errors import MissingPrivilege, ServerUnreachable, root_cause
from ..protocol.outcome import Kind, Outcome
from ..protocol.votes import Vote


class PartitionWriter(ABC):
    """Executor side of one target: stages one Spark partition's rows. Pickled to the
    executors, so it holds plain fields only and connects in open().

    A retried or speculative task attempt of the same partition must leave no duplicate:
    either it replaces what an earlier attempt of the partition staged, or the
    participant keeps only the attempts Spark reports as successful (`attempt`)."""

    @abstractmethod
    def open(self, partition: int, attempt: str) -> None:
        """Start staging Spark partition `partition`; `attempt` is unique per task attempt."""

    @abstractmethod
    def write(self, batch) -> None:
        """Stage one pyarrow.RecordBatch (every column of the staged frame; take yours)."""

    @abstractmethod
    def close(self) -> dict:
        """Make the partition's staging durable; a small JSON-able report ({"rows": n, ...})
        that reaches prepare() for the successful attempt only. Raises if anything was lost."""

    def discard(self) -> None:
        """The attempt failed: release what open() took (connections). Never raises."""

    def jvm_spec(self, fields: list[tuple[str, str]]) -> dict[str, str]:
        """The settings of this writer's form in the executors' JVM (spark/jvm_stage.py, a
        writer class of spark/jvm/StagePass.java), for a frame of `fields` ((name, Spark
        type as simpleString), in order). Raises NotInJvm saying why when it has none, or
        cannot write this frame: then the whole pass runs in Python.

        Its key `reads` lists the ordinals of the fields it reads (comma-separated): the
        pass computes no other column for it (a Staging column no writer reads is never
        computed)."""
        raise NotInJvm(f"{type(self).__name__} has no JVM form")


class NotInJvm(Exception):
    """A writer cannot stage a frame in the JVM; the message says why."""


# Spark's types (simpleString) whose values the JVM writers write themselves, and their
# names for them in the Java sources (spark/jvm: StagingCopy's CSV, RecordJson's JSON).
_JVM_TYPES = {"string": "string", "tinyint": "byte", "smallint": "short", "int": "int", "bigint": "long",
              "boolean": "boolean", "float": "float", "double": "double", "date": "date", "timestamp": "timestamp"}
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")


def jvm_type(spark_type: str) -> str | None:
    """The JVM writers' name of a Spark type (simpleString; a decimal: decimal:P:S), or
    None when they do not write it."""
    decimal = _DECIMAL.match(spark_type)
    return _JVM_TYPES.get(spark_type) or (f"decimal:{decimal[1]}:{decimal[2]}" if decimal else None)


@dataclass
class Staging:
    """What stage() returns: the writers (picklable, one per target) and what prepare()
    needs from the driver side of staging (`marks`, plain data).

    `frames`: per target, which of the job's frames feeds its writer ('' = the main one).
    `columns`: per target, extra columns the staging pass computes in Spark (the JVM)
    before the batches reach its writer, as {name: Spark SQL expression}, so a writer does
    no per-row work in Python that Spark can do (a Kafka record's key, value, checksum)."""

    writers: dict[str, PartitionWriter]
    marks: dict = field(default_factory=dict)
    frames: dict[str, str] = field(default_factory=dict)
    columns: dict[str, dict[str, str]] = field(default_factory=dict)

    def frame_of(self, target: str) -> str:
        return self.frames.get(target, "")


@dataclass(frozen=True)
class Swept:
    """One orphan a participant's sweep found, and what it did with it."""

    load_id: str
    action: str
    detail: str = ""


class Participant(ABC):
    """One transactional resource of a load. See the module docstring for the rules."""

    kind: ClassVar[str]
    commit_may_fail: ClassVar[bool] = False
    # Among participants whose commit may fail: the more likely to fail for good commits
    # first (higher first), so that it fails while nothing is committed yet.
    commit_risk: ClassVar[int] = 0
    # Readers keep seeing a committed load's data after a later load replaced its interval
    # (a topic is a log: it cannot be rewritten); tables drop the replaced rows.
    append_only: ClassVar[bool] = False
    # This kind can commit as a load's last resource (see the module docstring).
    can_commit_last: ClassVar[bool] = False
    # This instance is its load's last resource (participants_of sets it from the load).
    last_resource: bool = False

    name: str            # unique in the load: the key of its vote in the log
    load_id: str
    attempt: int = 1     # the prepare attempt whose staging it acts on (constructor's `attempt`)
    targets: tuple[str, ...]  # the names of the targets it writes
    endpoint: str        # the server it talks to (a DSN may hold a password: never log it)

    @classmethod
    def group_of(cls, target) -> str:
        """Targets of this kind on one server with the same group share one participant;
        '' (the default) puts them all in one."""
        return ""

    @abstractmethod
    def stage(self, frames: Mapping[str, list[str]]) -> Staging:
        """Driver, before the staging pass: check the targets can take the load (`frames`:
        the columns of each of the job's frames, by frame name; '' is the main one) and
        raise an error naming the problem, with nothing written; discard whatever an
        earlier attempt of this load staged; make fresh staging."""

    @abstractmethod
    def prepare(self, marks: dict, reports: Mapping[str, list[dict]], expected: Mapping[str, int]) -> Vote:
        """Driver, after the staging pass: make the staged data ready to commit without
        making it visible, and vote. `reports`: per target, the successful attempts'
        close() reports, each with its `part` and `attempt`; `expected`: per target, the
        rows Spark computed. Votes no (never raises) when what was staged is not exactly
        the expected rows; raises on a failure to prepare."""

    def discard(self) -> str:
        """Driver, in a prepare attempt the log superseded (a later attempt claimed the load,
        or the load was decided): drop what this attempt staged and prepared, touching
        neither other attempts' staging nor the load's outcome. '' when done, else what was
        left for the latest attempt or the sweep. Never raises. The default has nothing of
        its own to drop (staging that only the vote's names can promote)."""
        return ""

    def must_commit_last(self) -> str:
        """Begin, before anything is staged: why this participant cannot prepare and must
        commit as the load's last resource (one line naming the setting, shown with the
        load), or '' when it prepares. ServerUnreachable when it cannot tell now. Only a
        kind that `can_commit_last` says so. The default: ''."""
        return ""

    def decided(self) -> str | None:
        """A last resource: the load's decision its marker records, "COMMIT" or "ABORT";
        None when none is recorded yet. ServerUnreachable when it cannot tell now."""
        raise NotImplementedError(f"{self.kind} participants cannot commit as a last resource")

    def claim_abort(self) -> str:
        """A last resource: record the load's ABORT in its marker unless COMMIT is there,
        waiting for a commit still running, and return the decision that stands: "ABORT"
        (its commit can never happen now) or "COMMIT" (it committed: the load must too).
        Idempotent. ServerUnreachable when it cannot tell now."""
        raise NotImplementedError(f"{self.kind} participants cannot commit as a last resource")

    def budget(self, vote: Vote, earlier: list[dict], staged_since: datetime) -> str:
        """Vote task, before ready(): '' when the commit fits this participant's settings,
        else why not, naming the setting to change, so the vote aborts the load instead
        of its commit failing halfway. `earlier`: this participant's commit outcomes in
        the pipeline's last committed loads ({kind, seconds, count}, newest first);
        `staged_since`: no staged data of the load is older. ServerUnreachable when it
        cannot tell now. The default: no budget."""
        return ""

    def ready(self, vote: Vote) -> Vote:
        """Vote task, after every vote is yes and the rules passed, right before the
        decision: make the load ready to commit and vote again. Returns the vote commit
        and abort will read (the same one, or with more in `committable`), or a no vote
        naming what no longer holds (staging lost, a target dropped). ServerUnreachable
        when it cannot tell now. Idempotent. The default: the vote stands."""
        return vote

    def staged_rows(self, vote: Vote, target: str):
        """The audit, between prepare and vote: `target`'s staged rows, read where they
        were staged without moving them (an audit.StagedRows); None when this kind cannot
        read them before the commit. Reads only."""
        return None

    @abstractmethod
    def commit(self, vote: Vote) -> Outcome:
        """Make the load visible. DONE, ALREADY_DONE (an earlier attempt did), each with
        `visible`: per target, the rows or records of the load readers see now; RETRY_LATER
        (transient, outcome known or learnt again by the retry), FAILED (for good; `reason`)."""

    @abstractmethod
    def abort(self, vote: Vote | None) -> Outcome:
        """Discard everything staged for the load; `vote` is None when prepare did not get
        that far. FAILED when the load is already committed here."""

    def carry_source(self, source, fixed, address: str) -> bool:
        """Before commit, in the same step: take the load's consumed source position
        (`source`, a twophase.sources Source; `fixed`, its Range; `address`, its server),
        to commit it with this participant's own commit, atomically, where the source
        lives on this participant's server (Kafka: the source group's offsets in the copy
        transaction). True if taken; then every commit that is DONE or ALREADY_DONE has
        committed it. By default a participant takes none (the coordinator then mirrors
        the position itself, after the commit: sourcing.hand_over)."""
        return False

    def clean_up(self, vote: Vote) -> str:
        """After the commit is logged: drop staging. '' when done, else what was left for
        recovery's sweep. Never raises: the load is committed."""
        return ""

    @abstractmethod
    def visible(self, load_ids: list[str]) -> dict[str, dict[str, int]]:
        """What readers see now: {load_id: {target: rows or records}} for the given loads
        (every load and target present, 0 when nothing is visible)."""

    def unreachable(self, exc: BaseException) -> ServerUnreachable | None:
        """When a raw client error (raised here, or quoted by Spark from an executor) means
        this participant's server did not answer: that as ServerUnreachable (one line
        naming the server); else None."""
        return None

    @classmethod
    def sweep(cls, endpoint: str, state_of: Callable[[set[str]], Mapping[str, Any]],
              pipeline: str | None = None) -> list[Swept]:
        """Recovery, on one server of this kind (`endpoint`: its DSN, bootstrap servers...):
        find staging of loads that ended or that the log does not know (`state_of(load_ids)`
        -> {load_id: State}, unknown ones absent) and discard it; with `pipeline`, only the
        staging of that pipeline's loads (ids.of_pipeline), never another's. Idempotent."""
        return []


@contextmanager
def servers_of(participants: list[Participant]):
    """A raw client error that means a participant's server is down leaves as that
    participant's ServerUnreachable; every other error passes unchanged."""
    try:
        yield
    except ServerUnreachable:
        raise
    except Exception as exc:
        for p in participants:
            down = p.unreachable(exc)
            if down is not None:
                raise down from None
        raise


def outcome_of(participant: Participant, hook: str, call: Callable[[], Outcome]) -> Outcome:
    """Run a participant's commit or abort: the one place an exception becomes an outcome.

    - ServerUnreachable, or a raw client error the participant says means its server is
      down (`unreachable`): RETRY_LATER, its one-line message.
    - MissingPrivilege (a role lacks a grant): raised, Terminal; the load keeps its state,
      and a retry after the grant finishes it.
    - Any other exception: RETRY_LATER naming the hook and the root cause. The outcome of
      the call is unknown (it may have acted before failing), and FAILED would make the
      coordinator roll back or declare a violation on a guess; every hook is idempotent, so
      a retry learns the truth. A bug that fails every time keeps the load COMMITTING or
      ABORTING, and the task fails loudly after its retries; recovery retries it again.
    The result carries how long the call took."""
    started = time.perf_counter()
    try:
        outcome = call()
    except MissingPrivilege:
        raise  # a grant is missing: retrying cannot help until an admin grants it
    except ServerUnreachable as exc:
        outcome = Outcome(participant.name, Kind.RETRY_LATER, str(exc))
    except Exception as exc:  # noqa: BLE001 - see above: unknown outcome, retry
        down = participant.unreachable(exc)
        outcome = Outcome(participant.name, Kind.RETRY_LATER, str(down) if down is not None else
                          f"{hook} raised unexpectedly, outcome unknown until retried: {root_cause(exc)}")
    return replace(outcome, seconds=time.perf_counter() - started)
