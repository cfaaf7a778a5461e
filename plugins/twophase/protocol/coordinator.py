"""The coordinator's steps, as plain functions over the log and the participants.

Each step is one call (an Airflow task calls exactly one), safe to retry, and starts by
reading the load's state from the log, so a retry resumes where the last attempt stopped:

    begin -> prepare -> vote (ready, decide) -> commit | rollback

Between prepare and vote, the gates beside the protocol may run their steps (twophase.gates:
the audit, a person's approval); the vote reads their verdicts. The coordinator names no
kind of participant and no gate: it drives every participant of the load through the
contract (twophase.participants.contract) and commits them in commit order (those whose
commit can still fail for good first; docs/adr/0001-commit-order.md).

Errors (errors.Transient or errors.Terminal): RetryLater (transient: a server down, a live
concurrent attempt; its message is one line), LoadAborted (the load ended ABORTED during
commit), ProtocolViolation (a participant lost data the protocol could not protect; the
load is VIOLATED). A failed prepare logs its root cause (errors.root_cause) as the load's
prepare_error, which the vote's ABORT reason quotes.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from .. import failpoints
from .. import metrics as job_metrics
from .. import schema
from ..connections import Connections
from ..errors import ServerUnreachable, Terminal, Transient, root_cause
from ..log import Load, StateConflict, Superseded, TransactionLog
from ..participants import commit_order, last_resource_of
from ..participants.contract import Participant, outcome_of, servers_of
from ..spec import LoadSpec, SpecError
from . import lease, sourcing
from .sourcing import NothingToRead, SourceBusy  # noqa: F401 - raised by begin, for its callers
from .outcome import Kind, Outcome
from .states import PHASE_2, TERMINAL, State
from .votes import Vote
from .voting import claim_problems, commit_problems, owned, reasons_to_abort


class RetryLater(Transient):
    """A participant could not act now (server down, live concurrent attempt); retry."""


class LoadAborted(Terminal):
    """The load ended ABORTED; the message says why."""


class ProtocolViolation(Terminal):
    """Data was lost outside the protocol's control; the load is VIOLATED."""


class AlreadyCommitted(Terminal):
    """Append mode, and the pipeline already committed a load of this data interval."""

    def __init__(self, load: Load):
        super().__init__(f"the data interval starting {load.data_interval_start} was already committed by load "
                         f"{load.load_id} (finished {load.finished_at}); loading it again would duplicate it. "
                         "Nothing to do; run in mode 'replace' to reload it.")
        self.load = load


class IntervalBusy(Terminal):
    """Another load of the same pipeline and data interval is still in flight."""


class TwoLastResources(Terminal):
    """More than one participant of the load cannot prepare: it cannot be atomic."""


class PipelineOfAnotherDag(Terminal):
    """The pipeline's loads are begun by another DAG: two DAGs of one pipeline would give
    their runs the same load ids, and its pages would answer to the wrong DAG's readers."""


class DecidedCommit(Terminal):
    """A rollback found that the load's last resource had committed: the decision is
    COMMIT (logged now), and the load's commit must be driven instead."""


@contextmanager
def step(log: TransactionLog, load_id: str, conns: Connections):
    """Reads the load once and builds its participants for one step: yields (load,
    participants). A server that does not answer (the log's, a participant's) is
    transient: RetryLater with one line naming it, never a client library's traceback.
    The log maps its own server's errors; a participant's raw errors are mapped by the
    participant. An unknown load raises UnknownLoad."""
    try:
        load = log.get(load_id)
        parts = conns.participants(load.spec(), load.attempt)
        with servers_of(parts):
            yield load, parts
    except ServerUnreachable as exc:
        raise RetryLater(str(exc)) from None


def begin(log: TransactionLog, spec: LoadSpec, conns: Connections | None = None, empty: str = "load") -> Load:
    """Log the load (state PREPARING) before anything is staged. Idempotent.

    Exactly once per data interval (when the spec has one), decided atomically with
    the other begins of that interval:
    - another load of the interval still in flight: IntervalBusy, nothing logged;
    - append mode and a load of the interval committed: AlreadyCommitted, nothing logged;
    - replace mode: the load records which committed loads it replaces, and each target
      marks them its own way (a topic's records get headers `twophase.mode: replace` and
      `twophase.replaces: <load ids>`, so consumers can drop what it replaces).
    Exactly once per source (when the spec has one, read through `conns`), decided
    atomically with the other begins of that source:
    - another load of the source still in flight: SourceBusy, nothing logged;
    - else the source fixes the range the load reads: what follows the committed loads'
      ranges and the records an operator skipped (an aborted load's range is read again),
      checked to continue them without a gap or an overlap (SourceError naming it, nothing
      logged), and logged with the load;
    - an empty range: NothingToRead when `empty` is "skip" (nothing logged), else an empty
      load is begun.
    Which participant commits last (docs/adr/0011), asked of each through `conns`: the
    one that cannot prepare is recorded with the load, why included; two or more:
    TwoLastResources, nothing logged.
    """
    log.ensure_schema()
    _check_dag(log, spec)
    if conns is not None:
        spec = _with_last_resource(spec, conns)
    load, _created = log.begin(spec, plan=lambda others: _plan(spec, others),
                               fix=lambda planned, others: sourcing.fix(planned, others, conns, empty,
                                                                        log.skips(spec.source.key)))
    return load


def _check_dag(log: TransactionLog, spec: LoadSpec) -> None:
    """One DAG per pipeline: PipelineOfAnotherDag when its newest load was begun by another."""
    if spec.dag_id is None:
        return
    newest = log.recent(1, spec.pipeline)
    other = newest[0].dag_id if newest else None
    if other is not None and other != spec.dag_id:
        raise PipelineOfAnotherDag(
            f"pipeline {spec.pipeline} is loaded by DAG {other}, not by {spec.dag_id}: two DAGs of one pipeline "
            "would give their runs the same load ids. Give this DAG a pipeline of its own (LoadConfig(pipeline=...)"
            ", or leave it unset: the DAG id). Nothing was logged.")


def _with_last_resource(spec: LoadSpec, conns: Connections) -> LoadSpec:
    """The spec with the participant that must commit last, if one must (`must_commit_last`)."""
    parts = conns.participants(spec)
    try:
        with servers_of(parts):
            last = {p.name: why for p in parts if (why := p.must_commit_last())}
    except ServerUnreachable as exc:
        raise RetryLater(str(exc)) from None
    if len(last) > 1:
        raise TwoLastResources(
            f"load {spec.load_id} cannot be atomic: " + "; ".join(f"{name} cannot prepare ({why})"
                                                                  for name, why in last.items())
            + ". At most one participant of a load may commit without preparing, as its last resource: let all "
            "but one prepare (Postgres: max_prepared_transactions above 0 in postgresql.conf, then a restart), or "
            "load them in pipelines of their own. Nothing was staged.")
    if not last:
        return replace(spec, last_resource="", last_resource_why="")
    (name, why), = last.items()
    return replace(spec, last_resource=name, last_resource_why=why)


def _plan(spec: LoadSpec, others: list[Load]) -> LoadSpec:
    busy = [o for o in others if o.state not in TERMINAL]
    if busy:
        raise IntervalBusy("; ".join(f"load {o.load_id} of the same data interval is {o.state}" for o in busy)
                           + ": wait for it to end (twophase_recovery resolves a crashed one)")
    committed = [o for o in others if o.state == State.COMMITTED]
    if spec.mode == "append":
        if committed:
            raise AlreadyCommitted(committed[-1])
        return spec
    return spec.replacing([o.load_id for o in committed])


def prepare(log: TransactionLog, conns: Connections, load_id: str, df, metrics: dict | None = None,
            stage=None) -> dict[str, Vote]:
    """Stage the job's output to every participant, log their votes, move the load to PREPARED.

    `df`: the job's DataFrame, or {frame name: DataFrame} when targets load different
    frames (a target's `frame`; '' is the main one). Each frame is streamed once.
    `metrics`: the job's own figures (input_lines, rejected_lines...), logged for the
    quality rules of the vote; held to their contract (twophase/metrics.py) before anything
    is staged: a breach fails the prepare, naming it. `stage(df, stagings) ->
    spark_stage.Staged`: the staging pass, Spark's (spark_stage.stage) unless a test runs
    writers in-process.

    Runs in the Spark driver. Each call is a prepare attempt: it claims the next attempt
    number in the log and stages under names of its own, so a retry restages from scratch
    while an earlier attempt may still run (a zombie Spark application whose submitting
    process died). Only the latest attempt may log votes and move the load to PREPARED;
    one that finds itself superseded, or the load decided meanwhile (recovery's presumed
    abort), discards what it staged (each participant's discard) and raises Superseded
    or StateConflict.
    """
    load = log.get(load_id)
    if load.state == State.PREPARED:
        return log.votes(load_id)
    if load.state != State.PREPARING:
        raise StateConflict(load_id, load.state, [State.PREPARING])
    attempt = log.claim_prepare(load_id)
    parts = conns.participants(load.spec(), attempt)
    try:
        job_metrics.check(metrics or {})
        with servers_of(parts):
            return _prepare(log, conns, load, parts, df, metrics, stage, attempt)
    except StateConflict:
        raise
    except Exception as exc:
        _raise_if_superseded(log, load_id, attempt, parts, exc)
        record_prepare_error(log, load_id, exc, attempt)
        raise


def _check_schemas(spec: LoadSpec, frames: dict) -> None:
    """Each frame whose targets declare a schema has exactly its columns and types
    (twophase.schema), before anything is staged: SpecError naming every difference."""
    problems = []
    for frame, declared in schema.declared(spec.targets).items():
        if frame not in frames:
            continue  # the participants name a frame the job did not return
        df = frames[frame]
        dtypes = getattr(df, "dtypes", None) or [(c, None) for c in df.columns]
        named = f"the job's frame {frame!r}" if frame else "the job's frame"
        problems += schema.frame_problems(declared, dtypes, named)
    if problems:
        raise SpecError("the job's output does not match the load's schema: " + "; ".join(problems))


def _raise_if_superseded(log: TransactionLog, load_id: str, attempt: int, parts: list[Participant],
                         exc: Exception) -> None:
    """A prepare attempt that failed because a later one took its staging away (dropped
    its tables, deleted its files) says so, and discards what it left, instead of
    reporting the symptom. Best effort: with the log unreadable, the error stands."""
    try:
        load = log.get(load_id)
    except Exception:  # noqa: BLE001 - the original error is the one to raise
        return
    if load.prepare_attempt != attempt:
        for p in parts:
            p.discard()
        raise Superseded(load_id, attempt, load.prepare_attempt, load.state) from exc


def record_prepare_error(log: TransactionLog, load_id: str, exc: BaseException, attempt: int | None = None) -> str:
    """Log why prepare failed (its root cause, one line) for the vote and the rollback;
    returns it. Best effort: with the log's server down, the vote says prepare did not finish.
    `attempt`: only while that attempt is the load's latest."""
    cause = root_cause(exc)
    try:
        log.record_prepare_error(load_id, cause, attempt)
    except Exception:  # noqa: BLE001 - never hide the prepare's own error behind this one
        pass
    return cause


def _prepare(log: TransactionLog, conns: Connections, load: Load, parts: list[Participant], df,
             metrics: dict | None, stage, attempt: int) -> dict[str, Vote]:
    if stage is None:
        from ..spark.stage import stage

    load_id = load.load_id
    frames = df if isinstance(df, dict) else {"": df}
    _check_schemas(load.spec(), frames)
    stagings = {p.name: p.stage({name: list(frame.columns) for name, frame in frames.items()}) for p in parts}
    staged = stage(frames, stagings)
    sourcing.still_as_fixed(load, conns)
    try:
        log.set_expected(load_id, staged.expected, metrics, rows=staged.expected.get(load.spec().targets[0].name),
                         attempt=attempt)
        votes = [owned(p.prepare(stagings[p.name].marks, staged.reports[p.name],
                                 {t: staged.expected[t] for t in p.targets}), p.name) for p in parts]
        for v in votes:
            log.record_vote(load_id, v, attempt)
        failpoints.hit("coordinator.votes_logged")
        log.transition(load_id, State.PREPARED, expect=[State.PREPARING], attempt=attempt)
    except StateConflict:  # superseded, or decided meanwhile: this attempt's staging never counts
        for p in parts:
            p.discard()
        raise
    return {v.participant: v for v in votes}


def vote(log: TransactionLog, conns: Connections, load_id: str, rules=(), gates=()) -> Load:
    """Check the votes, make every participant ready, and decide; the decision is durable
    before this returns.

    Already decided: returns the load unchanged. Still PREPARING (prepare failed or is
    missing): decides ABORT. So does a vote that is not what the load staged (voting),
    a reason of any of the `gates` beside the protocol (twophase.gates: the audit's
    rules, a person's approval: each reads what its step logged with the load), and a
    participant whose commit would not fit its settings (`Participant.budget`, the
    participant's own veto, from the pace of its commits in the pipeline's earlier loads,
    which each commit logs). Every vote yes and the
    rules passed: the log records when the load's exposure starts (`exposed_at`), then
    each participant's ready() takes what its
    commit needs (a prepared transaction) and checks its staging is still whole; its
    readied vote replaces the prepared one. A no from ready aborts, naming why.

    A load with a last resource (docs/adr/0011): its marker is read first, and a decision
    it records (an earlier vote committed it and died before logging) is the decision.
    Else, once every other participant is ready, its commit is the decision: done, COMMIT
    is logged; failed, ABORT. Before ABORT is logged its ABORT marker is claimed, and if
    the marker says COMMIT after all (a concurrent vote committed it), COMMIT is logged.
    """
    with step(log, load_id, conns) as (load, parts):
        return _vote(log, load, parts, rules, gates)


def _vote(log: TransactionLog, load: Load, parts: list[Participant], rules, gates=()) -> Load:
    load_id = load.load_id
    if load.state not in (State.PREPARING, State.PREPARED):
        return load
    last = last_resource_of(parts)
    if load.state == State.PREPARING:
        reasons = [f"prepare failed: {load.prepare_error}" if load.prepare_error
                   else "prepare did not finish (the Spark job failed or was never run)"]
    elif last is not None and (marked := last.decided()) is not None:
        # An earlier vote committed the last resource (or a rollback claimed its ABORT) and
        # died before logging the decision: that marker is the decision. Nobody is readied
        # again: a prepared transaction rolled back to prepare anew could be lost meanwhile.
        reasons = [] if marked == "COMMIT" else [f"{last.name}, the load's last resource, records ABORT: a "
                                                 "rollback decided it before this vote"]
    else:
        votes = log.votes(load_id)
        reasons = reasons_to_abort({p.name: p.targets for p in parts}, votes, _expected(load), list(rules),
                                   load.metrics, load.expected_rows)
        reasons += [reason for gate in gates for reason in gate.reasons(load)]
        if not reasons:
            reasons = (_over_budget(log, load, parts, votes) or _make_ready(log, load, parts, votes)
                       or _commit_last(log, load_id, last))
    if reasons and last is not None and last.claim_abort() == "COMMIT":
        reasons = []  # a concurrent vote committed the last resource: that was the decision
    try:
        if reasons:
            decided, _ = log.transition(load_id, State.ABORTING, expect=[State.PREPARING, State.PREPARED],
                                        reason="; ".join(reasons))
        else:
            decided, _ = log.transition(load_id, State.COMMITTING, expect=[State.PREPARED])
    except StateConflict:  # decided meanwhile (a concurrent vote, recovery's presumed abort): that decision stands
        decided = log.get(load_id)
        if decided.state in (State.PREPARING, State.PREPARED):
            raise
    failpoints.hit("coordinator.decision_logged")
    return decided


def _commit_last(log: TransactionLog, load_id: str, last: Participant | None) -> list[str]:
    """The last resource's commit, once every other participant is ready: the load's
    decision (docs/adr/0011). [] when it committed, else why the load aborts. Its outcome
    unknown (a server lost during COMMIT): RetryLater, the load still PREPARED; the
    retried vote, or recovery, learns it from the marker."""
    if last is None:
        return []
    vote = log.votes(load_id)[last.name]  # as ready() left it
    outcome = outcome_of(last, "commit", lambda: last.commit(vote))
    if outcome.kind == Kind.RETRY_LATER:
        raise RetryLater(f"{outcome.describe()}; its commit is the load's decision: a retried vote, or recovery, "
                         "reads from its marker whether it committed")
    failpoints.hit("coordinator.last_committed")
    if outcome.kind == Kind.FAILED:
        return [f"{last.name}, the load's last resource, did not commit: {outcome.reason}"]
    return []


def _expected(load: Load) -> dict[str, int] | None:
    """Spark's rows per target; a load logged before targets had names has one count for
    all, which each participant's vote total is compared with."""
    if load.expected is not None:
        return load.expected
    if load.expected_rows is None:
        return None
    return {name: load.expected_rows for name in load.participants}  # the old form: {"postgres": ..., "kafka": ...}


def _over_budget(log: TransactionLog, load: Load, parts: list[Participant], votes: dict[str, Vote]) -> list[str]:
    """Why a participant's commit would not fit its settings, estimated from the pace of
    its commits in the pipeline's earlier loads ([] when all fit). A server down raises
    (RetryLater: a retried vote checks again); a budget that cannot be checked otherwise
    (its staging topic deleted) is a reason to abort, as in _make_ready."""
    reasons = []
    for p in parts:
        try:
            why = p.budget(votes[p.name], log.commit_history(load.pipeline, p.name), load.began_at)
        except ServerUnreachable:
            raise
        except Exception as exc:  # noqa: BLE001 - see above
            why = f"its budget could not be checked: {root_cause(exc)}"
        if why:
            reasons.append(f"{p.name} would not commit in time: {why}")
    return reasons


def _make_ready(log: TransactionLog, load: Load, parts: list[Participant], votes: dict[str, Vote]) -> list[str]:
    """Every participant's ready(), in commit order, its readied vote logged; the
    reasons to abort ([] when all are ready). A server down raises (RetryLater, the load
    still PREPARED: a retried vote readies again); any other error of ready is a reason to
    abort (aborting is always safe before the decision, and abort undoes what ready took).
    The readied vote is what commit reads, so its claims are checked again as the vote's
    were (voting.claim_problems): the same participant, the same rows Spark computed."""
    load_id = load.load_id
    log.mark_exposed(load_id)
    reasons = []
    for p in commit_order(parts):
        try:
            readied = owned(p.ready(votes[p.name]), p.name)
        except ServerUnreachable:
            raise
        except Exception as exc:  # noqa: BLE001 - see above
            reasons.append(f"{p.name} could not be made ready: {root_cause(exc)}")
            continue
        if readied != votes[p.name]:
            log.record_vote(load_id, readied)
        if not readied.yes:
            reasons.append(f"{p.name} is not ready: {readied.reason}")
        else:
            reasons += [f"after ready: {why}" for why in
                        claim_problems(p.name, p.targets, readied, _expected(load) or {})]
    failpoints.hit("coordinator.readied")
    return reasons


def commit(log: TransactionLog, conns: Connections, load_id: str) -> list[Outcome]:
    """Phase 2, COMMIT, as the load's one driver (lease.py: DriverBusy while another step
    drives it): every participant in commit order, then log COMMITTED, then each
    participant's clean_up (what it leaves is swept by recovery). A load with a source: its
    consumed position goes to the source's own tools, in a participant's commit that can
    carry it, else once COMMITTED is logged (sourcing.hand_over).

    - RETRY_LATER from any participant: RetryLater; the state stays COMMITTING and a retry
      finds the ones already done ALREADY_DONE.
    - FAILED while no participant has committed (the first one, which can fail for good
      after a yes vote: a Kafka copy whose staged records expired): that participant is
      fenced first (_fence_first); then the load is rolled back and ends ABORTED,
      LoadAborted; or, when the fence finds its commit landed after all, the commit goes on.
    - FAILED after another participant committed (a prepared transaction lost, or a
      second may-fail participant failing): VIOLATED, loud; ProtocolViolation.
    - DONE or ALREADY_DONE with other rows visible than the vote counted, per target (its
      prepared data lost and an empty commit, a duplicate): VIOLATED, loud, naming the
      target and both figures; ProtocolViolation.
    - Called again on a load such a failure left ABORTING (its rollback said retry
      later): finishes the rollback, then LoadAborted.
    """
    with step(log, load_id, conns) as (load, parts):
        mirror = sourcing.hand_over(load, conns, parts)
        outcomes = _commit(log, load, parts)
    if mirror and outcomes:  # committed by this call
        mirror()
    return outcomes


def _commit(log: TransactionLog, load: Load, parts: list[Participant]) -> list[Outcome]:
    load_id = load.load_id
    if load.state == State.COMMITTED:
        return []
    if load.state not in PHASE_2:
        raise StateConflict(load_id, load.state, [State.COMMITTING])
    try:
        driver = lease.claim(log, load_id)  # DriverBusy: another step drives it now
    except StateConflict:  # it moved since it was read (another driver finished it): look again
        return _commit(log, log.get(load_id), parts)
    with lease.held(log, load_id, driver):
        load = log.get(load_id)
        if load.state == State.ABORTING:  # an earlier attempt found a participant failed for good
            rolled_back = _abort_all(log, load, parts, driver)
            raise LoadAborted(f"load {load_id} ABORTED: {load.reason}; rollback: "
                              + ("; ".join(o.describe() for o in rolled_back) or "nothing left to do"))
        return _commit_all(log, load, parts, driver)


def _commit_all(log: TransactionLog, load: Load, parts: list[Participant], driver: str) -> list[Outcome]:
    """Every participant's commit in commit order, as the load's one driver; see commit()."""
    load_id = load.load_id
    votes = log.votes(load_id)
    parts = commit_order(parts)
    outcomes: list[Outcome] = []
    for p in parts:
        outcome = outcome_of(p, "commit", lambda p=p: p.commit(votes[p.name]))
        if outcome.kind == Kind.FAILED and not any(o.ok for o in outcomes):
            outcome = _fence_first(log, load, parts, p, votes[p.name], outcome, driver)
        outcomes.append(outcome)
        if outcome.kind == Kind.RETRY_LATER:
            raise _retry_later(outcomes)
        if outcome.ok and (wrong := commit_problems(votes[p.name], outcome)):
            _violated(log, load_id, "a commit made visible what its vote did not say: " + "; ".join(wrong), driver)
        if outcome.kind == Kind.FAILED:
            committed = ", ".join(f"{o.participant} committed {votes[o.participant].count}" for o in outcomes if o.ok)
            _violated(log, load_id, f"{committed} but {p.name} cannot commit: {outcome.reason}" if committed else
                      f"{p.name} cannot commit ({outcome.reason}), yet its abort says the load is committed there",
                      driver)
    # Each commit's kind, time, rows readers see, and what it did (an Iceberg snapshot's id...).
    log.record_outcomes(load_id, {o.participant: {"kind": o.kind.value, "seconds": o.seconds,
                                                  "count": sum(o.visible.values()), "did": o.counts}
                                  for o in outcomes})
    log.transition(load_id, State.COMMITTED, expect=[State.COMMITTING], driver=driver)
    failpoints.hit("coordinator.committed_logged")
    for i, p in enumerate(parts):
        try:
            left = p.clean_up(votes[p.name])
        except Exception as exc:  # noqa: BLE001 - the contract says never; the load is committed anyway
            left = f"clean_up raised: {root_cause(exc)}"
        if left:
            outcomes[i] = replace(outcomes[i], counts={**outcomes[i].counts, "staging": left})
    return outcomes


def _fence_first(log: TransactionLog, load: Load, parts: list[Participant], p: Participant, vote: Vote,
                 failed: Outcome, driver: str) -> Outcome:
    """The first committer failed for good while no participant has committed: the
    decision may turn to ABORT only once that participant is fenced, that is aborted (a
    commit of an earlier attempt whose outcome was unknown, or of a driver that stalled
    past its lease, may still have landed). The abort's answer decides:

    - done: nothing of the load is visible anywhere; the load is rolled back and ends
      ABORTED (LoadAborted);
    - FAILED because the load is committed there after all: the decision stands, and the
      participant's commit, asked again, is its outcome (ALREADY_DONE, what it made visible);
    - retry later: RETRY_LATER, the load stays COMMITTING with its decision."""
    fence = outcome_of(p, "abort", lambda: p.abort(vote))
    if fence.kind == Kind.RETRY_LATER:
        return replace(fence, reason=f"its commit failed ({failed.reason}); fencing it before the rollback must be "
                                     f"retried: {fence.reason}")
    if fence.kind == Kind.FAILED:
        return outcome_of(p, "commit", lambda: p.commit(vote))
    reason = f"{p.name} failed for good before any participant committed, so the load is rolled back: {failed.reason}"
    load, _ = log.transition(load.load_id, State.ABORTING, expect=[State.COMMITTING], reason=reason, driver=driver)
    rolled_back = _abort_all(log, load, parts, driver)
    raise LoadAborted(f"load {load.load_id} ABORTED: {reason}; rollback: " + "; ".join(o.describe() for o in rolled_back))


def rollback(log: TransactionLog, conns: Connections, load_id: str, reason: str | None = None) -> list[Outcome]:
    """Phase 2, ABORT, as the load's one driver (DriverBusy while another step drives it):
    discard everything the load staged, then log ABORTED.

    From PREPARING or PREPARED (prepare failed, or recovery presumes abort) it first
    logs the ABORT decision with `reason`; for a load with a last resource, once its ABORT
    marker is held (claim_abort), or, when the marker says it committed, logs COMMIT
    instead and raises DecidedCommit. Never touches the target topic.
    """
    with step(log, load_id, conns) as (load, parts):
        return _rollback(log, load, parts, reason)


def _rollback(log: TransactionLog, load: Load, parts: list[Participant], reason: str | None) -> list[Outcome]:
    load_id = load.load_id
    if load.state == State.ABORTED:
        return []
    if load.state in (State.PREPARING, State.PREPARED):
        last = last_resource_of(parts)
        if last is not None and last.claim_abort() == "COMMIT":
            log.transition(load_id, State.COMMITTING, expect=[State.PREPARING, State.PREPARED])
            raise DecidedCommit(f"load {load_id} cannot be rolled back: {last.name}, its last resource, committed "
                                "before the decision was logged, so the decision is COMMIT (logged now); its commit "
                                "finishes it (recovery drives it)")
        # `expect`: a vote that decided COMMIT since the read above wins; this raises
        # StateConflict rather than overwrite a logged decision (COMMITTING -> ABORTING is
        # the commit step's move alone).
        load, _ = log.transition(load_id, State.ABORTING, expect=[State.PREPARING, State.PREPARED],
                                 reason=reason or "rolled back before a decision")
    if load.state != State.ABORTING:
        raise StateConflict(load_id, load.state, [State.PREPARING, State.PREPARED, State.ABORTING])
    try:
        driver = lease.claim(log, load_id)  # DriverBusy: another step drives it now
    except StateConflict:  # it ended since it was read: look again
        return _rollback(log, log.get(load_id), parts, reason)
    with lease.held(log, load_id, driver):
        return _abort_all(log, log.get(load_id), parts, driver)


def _abort_all(log: TransactionLog, load: Load, parts: list[Participant], driver: str) -> list[Outcome]:
    """Every participant's abort, as the load's one driver, then ABORTED: RetryLater when
    one must be retried; VIOLATED when one has committed (ProtocolViolation)."""
    load_id = load.load_id
    votes = log.votes(load_id)
    outcomes = []
    for i, p in enumerate(commit_order(parts)):
        if i == 1:
            failpoints.hit("rollback.middle")
        outcomes.append(outcome_of(p, "abort", lambda p=p: p.abort(votes.get(p.name))))
    if any(o.kind == Kind.RETRY_LATER for o in outcomes):
        raise _retry_later(outcomes)
    failed = [o for o in outcomes if o.kind == Kind.FAILED]
    if failed:
        _violated(log, load_id, "rollback impossible: " + "; ".join(o.describe() for o in failed), driver)
    log.transition(load_id, State.ABORTED, expect=[State.ABORTING], driver=driver)
    return outcomes


def abandon(log: TransactionLog, load_id: str, by: str, why: str) -> Load:
    """An operator ends a rollback that cannot finish (its staging topic deleted, a role
    without the grant to roll back, a server gone for good): the load, ABORTING, becomes
    ABORTED with who abandoned it and why, which frees its data interval for new loads.
    Only a rollback can be abandoned: a decided COMMIT is finished, never given up.

    The person answers for what the rollback left (a prepared transaction, staged rows:
    recovery's sweep discards those of ended loads once it can). DriverBusy while a step
    still drives the load; StateConflict when it is not ABORTING."""
    load = log.get(load_id)
    if load.state != State.ABORTING:
        raise StateConflict(load_id, load.state, [State.ABORTING])
    driver = lease.claim(log, load_id)
    with lease.held(log, load_id, driver):
        load, _ = log.transition(load_id, State.ABORTED, expect=[State.ABORTING], driver=driver, reason=(
            f"{load.reason}; its rollback could not finish and was abandoned by {by}: {why}"))
    return load


def _violated(log: TransactionLog, load_id: str, reason: str, driver: str) -> None:
    """Log the load VIOLATED (from COMMITTING or ABORTING, as its driver) and say so loudly."""
    log.transition(load_id, State.VIOLATED, expect=PHASE_2, reason=reason, driver=driver)
    raise ProtocolViolation(f"load {load_id} VIOLATED: {reason}")


def _retry_later(outcomes: list[Outcome]) -> RetryLater:
    """What must be retried, and what the others did meanwhile (a retry finds it done)."""
    later = [o.describe() for o in outcomes if o.kind == Kind.RETRY_LATER]
    others = [o.describe() for o in outcomes if o.kind != Kind.RETRY_LATER]
    return RetryLater("; ".join(later) + (f" (meanwhile {'; '.join(others)})" if others else ""))
