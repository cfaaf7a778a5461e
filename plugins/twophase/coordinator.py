"""The coordinator's steps, as plain functions over the log and the participants.

Each step is one call (an Airflow task calls exactly one), safe to retry, and starts by
reading the load's state from the log, so a retry resumes where the last attempt stopped:

    begin -> prepare -> vote (decide) -> commit | rollback

Errors: RetryLater (transient: a server down, a live concurrent attempt; the task should
be retried; its message is one line), LoadAborted (the load ended ABORTED; raised by commit
when Kafka failed for good), ProtocolViolation (a participant lost data the protocol could
not protect; the load is VIOLATED). A failed prepare logs its root cause (errors.root_cause)
as the load's prepare_error, which the vote's ABORT reason quotes.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

from . import failpoints
from .errors import ServerUnreachable, root_cause, servers
from .log import Load, StateConflict, TransactionLog
from .outcome import Kind, Outcome
from .participants.kafka import KafkaParticipant
from .participants.postgres import PostgresParticipant, is_prepared
from .spec import Connections, LoadSpec
from .states import TERMINAL, State
from .voting import reasons_to_abort
from .votes import Vote


class RetryLater(RuntimeError):
    """A participant could not act now (server down, live concurrent attempt); retry."""


class LoadAborted(RuntimeError):
    """The load ended ABORTED; the message says why."""


class ProtocolViolation(RuntimeError):
    """Data was lost outside the protocol's control; the load is VIOLATED."""


class AlreadyCommitted(RuntimeError):
    """Append mode, and the pipeline already committed a load of this data interval."""

    def __init__(self, load: Load):
        super().__init__(f"the data interval starting {load.data_interval_start} was already committed by load "
                         f"{load.load_id} (finished {load.finished_at}); loading it again would duplicate it. "
                         "Nothing to do; run in mode 'replace' to reload it.")
        self.load = load


class IntervalBusy(RuntimeError):
    """Another load of the same pipeline and data interval is still in flight."""


@contextmanager
def _retry_when_down(conns: Connections):
    """A server that does not answer (the log's Postgres, a participant's server) is
    transient: RetryLater with one line naming it, never a client library's traceback."""
    try:
        with servers(pg_dsn=conns.pg_dsn, kafka_bootstrap=conns.kafka_bootstrap):
            yield
    except ServerUnreachable as exc:
        raise RetryLater(str(exc)) from None


@dataclass(frozen=True)
class Participants:
    postgres: PostgresParticipant
    kafka: KafkaParticipant

    @classmethod
    def of(cls, spec: LoadSpec, conns: Connections) -> "Participants":
        return cls(PostgresParticipant(conns.pg_dsn, spec.postgres, spec.load_id),
                   KafkaParticipant(conns.kafka_bootstrap, spec.kafka, spec.load_id))


def begin(log: TransactionLog, spec: LoadSpec) -> Load:
    """Log the load (state PREPARING) before anything is staged. Idempotent.

    Exactly once per data interval (when the spec has one), decided atomically with
    the other begins of that interval:
    - another load of the interval still in flight: IntervalBusy, nothing logged;
    - append mode and a load of the interval committed: AlreadyCommitted, nothing logged;
    - replace mode: the load's Kafka records get headers `twophase.mode: replace` and
      `twophase.replaces: <committed load ids>`, so consumers can drop what it replaces.
    """
    log.ensure_schema()
    load, _created = log.begin(spec, plan=lambda others: _plan(spec, others))
    return load


def _plan(spec: LoadSpec, others: list[Load]) -> LoadSpec:
    busy = [o for o in others if o.state not in TERMINAL]
    if busy:
        raise IntervalBusy("; ".join(f"load {o.load_id} of the same data interval is {o.state}" for o in busy)
                           + ": wait for it to end (twophase_recovery resolves a crashed one)")
    committed = [o for o in others if o.state == State.COMMITTED]
    if spec.postgres.mode == "append":
        if committed:
            raise AlreadyCommitted(committed[-1])
        return spec
    headers = {**spec.kafka.headers, "twophase.mode": "replace",
               "twophase.replaces": ",".join(o.load_id for o in committed)}
    return replace(spec, kafka=replace(spec.kafka, headers=headers))


def prepare(log: TransactionLog, conns: Connections, load_id: str, df, metrics: dict | None = None) -> dict[str, Vote]:
    """Stage df to both participants, log their votes, move the load to PREPARED.

    `metrics`: the job's own figures (input_lines, rejected_lines...), logged for the
    quality rules of the vote.

    Runs in the Spark driver. A retry restages from scratch (participants discard what an
    earlier attempt staged). If recovery aborted the load meanwhile, the Postgres
    transaction this call prepared is rolled back and StateConflict is raised.
    """
    load = log.get(load_id)
    if load.state == State.PREPARED:
        return log.votes(load_id)
    if load.state != State.PREPARING:
        raise StateConflict(load_id, load.state, [State.PREPARING])
    try:
        with servers(pg_dsn=conns.pg_dsn, kafka_bootstrap=conns.kafka_bootstrap):
            return _prepare(log, conns, load, df, metrics)
    except StateConflict:
        raise
    except Exception as exc:
        record_prepare_error(log, load_id, exc)
        raise


def record_prepare_error(log: TransactionLog, load_id: str, exc: BaseException) -> str:
    """Log why prepare failed (its root cause, one line) for the vote and the rollback;
    returns it. Best effort: with the log's server down, the vote says prepare did not finish."""
    cause = root_cause(exc)
    try:
        log.record_prepare_error(load_id, cause)
    except Exception:  # noqa: BLE001 - never hide the prepare's own error behind this one
        pass
    return cause


def _prepare(log: TransactionLog, conns: Connections, load: Load, df, metrics: dict | None) -> dict[str, Vote]:
    from . import spark_stage

    load_id = load.load_id
    spec = load.spec()
    parts = Participants.of(spec, conns)
    pg_copy = parts.postgres.begin()
    kafka_producer = parts.kafka.begin()
    results = spark_stage.stage(df, pg_copy.columns, spec.kafka.key_column, pg_copy, kafka_producer)
    expected = sum(r["rows"] for r in results)
    log.set_expected_rows(load_id, expected, metrics)
    votes = [parts.postgres.pre_commit(expected), parts.kafka.pre_commit(results, expected)]
    for vote in votes:
        log.record_vote(load_id, vote)
    failpoints.hit("coordinator.votes_logged")
    try:
        log.transition(load_id, State.PREPARED, expect=[State.PREPARING])
    except StateConflict:
        parts.postgres.abort()
        raise
    return {v.participant: v for v in votes}


def vote(log: TransactionLog, conns: Connections, load_id: str, rules=()) -> Load:
    """Check the votes and decide; the decision is durable before this returns.

    Already decided: returns the load unchanged. Still PREPARING (prepare failed or is
    missing): decides ABORT.
    """
    with _retry_when_down(conns):
        return _vote(log, conns, load_id, rules)


def _vote(log: TransactionLog, conns: Connections, load_id: str, rules) -> Load:
    load = log.get(load_id)
    if load.state not in (State.PREPARING, State.PREPARED):
        return load
    if load.state == State.PREPARING:
        reasons = [f"prepare failed: {load.prepare_error}" if load.prepare_error
                   else "prepare did not finish (the Spark job failed or was never run)"]
    else:
        votes = log.votes(load_id)
        reasons = reasons_to_abort(list(load.participants), votes, load.expected_rows, list(rules), load.metrics)
        if not reasons:
            reasons = _live_checks(load, votes, conns)
    if reasons:
        decided, _ = log.transition(load_id, State.ABORTING, reason="; ".join(reasons))
    else:
        decided, _ = log.transition(load_id, State.COMMITTING, expect=[State.PREPARED])
    failpoints.hit("coordinator.decision_logged")
    return decided


def _live_checks(load: Load, votes: dict[str, Vote], conns: Connections) -> list[str]:
    parts = Participants.of(load.spec(), conns)
    reasons = []
    gid = votes["postgres"].detail["gid"]
    if not is_prepared(conns.pg_dsn, gid):
        reasons.append(f"the prepared Postgres transaction {gid} does not exist")
    problem = parts.kafka.check_ranges(votes["kafka"].detail)
    if problem:
        reasons.append(problem)
    return reasons


def commit(log: TransactionLog, conns: Connections, load_id: str) -> list[Outcome]:
    """Phase 2, COMMIT: Kafka's copy first, then COMMIT PREPARED, then log COMMITTED,
    then drop Postgres' staging table (left to recovery if that fails).

    Kafka fails for good before Postgres committed: roll back, end ABORTED, raise
    LoadAborted. Postgres lost its prepared transaction after Kafka committed: VIOLATED,
    raise ProtocolViolation. Transient trouble: RetryLater (state stays COMMITTING).
    """
    with _retry_when_down(conns):
        return _commit(log, conns, load_id)


def _commit(log: TransactionLog, conns: Connections, load_id: str) -> list[Outcome]:
    load = log.get(load_id)
    if load.state == State.COMMITTED:
        return []
    if load.state != State.COMMITTING:
        raise StateConflict(load_id, load.state, [State.COMMITTING])
    votes = log.votes(load_id)
    parts = Participants.of(load.spec(), conns)
    kafka = _timed(parts.kafka.commit, votes["kafka"])
    if kafka.kind == Kind.RETRY_LATER:
        raise RetryLater(kafka.describe())
    if kafka.kind == Kind.FAILED:
        reason = f"Kafka commit failed for good before Postgres committed, so the load is rolled back: {kafka.reason}"
        log.transition(load_id, State.ABORTING, reason=reason)
        outcomes = rollback(log, conns, load_id)
        raise LoadAborted(f"load {load_id} ABORTED: {reason}; rollback: "
                          + "; ".join(o.describe() for o in outcomes))
    postgres = _timed(parts.postgres.commit)
    if postgres.kind == Kind.RETRY_LATER:
        raise _retry_later([kafka, postgres])
    if postgres.kind == Kind.FAILED:
        reason = f"Kafka committed {votes['kafka'].count} records but Postgres cannot commit: {postgres.reason}"
        log.transition(load_id, State.VIOLATED, reason=reason)
        raise ProtocolViolation(f"load {load_id} VIOLATED: {reason}")
    log.transition(load_id, State.COMMITTED)
    failpoints.hit("coordinator.committed_logged")
    left = parts.postgres.clean_up()
    if left:
        postgres = replace(postgres, counts={**postgres.counts, "staging": left})
    return [kafka, postgres]


def rollback(log: TransactionLog, conns: Connections, load_id: str, reason: str | None = None) -> list[Outcome]:
    """Phase 2, ABORT: discard everything the load staged, then log ABORTED.

    From PREPARING or PREPARED (prepare failed, or recovery presumes abort) it first
    logs the ABORT decision with `reason`. Never touches the target topic.
    """
    with _retry_when_down(conns):
        return _rollback(log, conns, load_id, reason)


def _rollback(log: TransactionLog, conns: Connections, load_id: str, reason: str | None) -> list[Outcome]:
    load = log.get(load_id)
    if load.state == State.ABORTED:
        return []
    if load.state in (State.PREPARING, State.PREPARED):
        load, _ = log.transition(load_id, State.ABORTING, reason=reason or "rolled back before a decision")
    if load.state != State.ABORTING:
        raise StateConflict(load_id, load.state, [State.PREPARING, State.PREPARED, State.ABORTING])
    votes = log.votes(load_id)
    parts = Participants.of(load.spec(), conns)
    outcomes = [_timed(parts.kafka.abort, votes.get("kafka"))]
    failpoints.hit("rollback.middle")
    outcomes.append(_timed(parts.postgres.abort, votes.get("postgres")))
    if any(o.kind == Kind.RETRY_LATER for o in outcomes):
        raise _retry_later(outcomes)
    failed = [o for o in outcomes if o.kind == Kind.FAILED]
    if failed:
        reason = "rollback impossible: " + "; ".join(o.describe() for o in failed)
        log.transition(load_id, State.VIOLATED, reason=reason)
        raise ProtocolViolation(f"load {load_id} VIOLATED: {reason}")
    log.transition(load_id, State.ABORTED)
    return outcomes


def _retry_later(outcomes: list[Outcome]) -> RetryLater:
    """What must be retried, and what the other participant did meanwhile (a retry finds it done)."""
    later = [o.describe() for o in outcomes if o.kind == Kind.RETRY_LATER]
    others = [o.describe() for o in outcomes if o.kind != Kind.RETRY_LATER]
    return RetryLater("; ".join(later) + (f" (meanwhile {'; '.join(others)})" if others else ""))


def _timed(call, *args) -> Outcome:
    started = time.perf_counter()
    outcome = call(*args)
    return replace(outcome, seconds=time.perf_counter() - started)
