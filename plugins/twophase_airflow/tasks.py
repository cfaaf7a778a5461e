"""What each task of a two-phase load does: one core call, and a log a person can read.

Every function takes the pipeline's LoadConfig and the task's Airflow context, derives
the load id from the DAG run (retries share it) and is safe to retry.
"""

from __future__ import annotations

import logging
from contextlib import closing
from datetime import date, datetime, time, timedelta, timezone

import psycopg2
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from twophase import ids
from twophase.audit import PASS
from twophase.audit.report import audit_summary
from twophase.connections import Connections
from twophase.errors import ServerUnreachable, Terminal, one_line
from twophase.gates import approval
from twophase.gates import audit_step, quarantine
from twophase.gates.approval import ApprovalGate
from twophase.gates.audit_step import AuditGate
from twophase.log import PostgresLog, TransactionLog, UnknownLoad
from twophase.ops import show
from twophase.participants.postgres.server import creating
from twophase.protocol import coordinator
from twophase.protocol.outcome import Outcome
from twophase.protocol.states import TERMINAL, State
from twophase.protocol.voting import MaxRejectedShare, MaxSkippedFiles, MinRows
from twophase.sources import Range
from twophase.spec import LoadSpec, SpecError

from .config import Interval, LoadConfig
from .connections import from_airflow, log_database
from .errors import airflow_outcome

log = logging.getLogger("twophase")

BEGIN_TASK = "begin"
# What begin tells finish when it begins no load (XCom keys of the begin task): finish
# runs whatever happened before it and is the task that says how the run ended.
NOTHING_TO_DO = "nothing_to_do"  # the day is already committed (append mode): the run succeeds
REFUSED = "refused"              # begin failed, with this reason: the run fails
# What the wait_for_input task (input_wait.py) tells finish when the input did not land:
# {"then": "fail" or "skip", "reason": ...}.
WAIT_TASK = "wait_for_input"
NOT_LANDED = "not_landed"


def load_id(pipeline: str, context) -> str:
    return ids.load_id_for(pipeline, context["run_id"])


def the_load(cfg: LoadConfig, pipeline: str, context) -> tuple[str, Connections, TransactionLog]:
    """The run's load id, the servers from the Airflow connections, and the log."""
    conns = from_airflow(cfg.log_conn_id, cfg.conn_ids())
    return load_id(pipeline, context), conns, PostgresLog(conns.pg_dsn)


def load_interval(params: dict, context) -> Interval:
    """The data interval a run loads: the whole day of the `date` param; else the run's
    data interval from the DAG's timetable (the midnight run of a daily DAG covers the day
    that just ended, an hourly DAG's run its hour); else (a manual run, whose interval is
    empty) yesterday (UTC), when the DAG has a `date` param (a daily pipeline); without
    one, the run is refused, naming the timetable to give the DAG."""
    if params.get("date"):
        try:
            return _day(date.fromisoformat(params["date"]))
        except ValueError:
            raise AirflowFailException(f"param date {params['date']!r} is not a date like 2026-11-20") from None
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is not None and end is not None and end > start:
        return Interval(start.astimezone(timezone.utc), end.astimezone(timezone.utc))
    if "date" not in params:  # load_params(pick_day=False): not a daily pipeline, yesterday would be wrong
        raise AirflowFailException(
            "this run has no data interval to load: its DAG's timetable gives its runs none (a cron string or "
            "preset such as '@hourly' makes a CronTriggerTimetable) and the DAG has no `date` param to name a "
            'day. Give it schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC") (airflow.sdk), whose '
            "runs each load their own interval")
    return _day(datetime.now(timezone.utc).date() - timedelta(days=1))


def _day(day: date) -> Interval:
    start = datetime.combine(day, time(0), tzinfo=timezone.utc)
    return Interval(start, start + timedelta(days=1))


def begin(cfg: LoadConfig, pipeline: str, context) -> bool:
    """Log the load before anything is staged. False (skip prepare) when the day is
    already committed and the mode is append: exactly once per day.

    When it begins no load it says why in XCom for finish: NOTHING_TO_DO before returning
    False, REFUSED (the reason in one line) before raising.
    """
    try:
        return _begin(cfg, pipeline, context)
    except Exception as exc:
        context["ti"].xcom_push(key=REFUSED, value=_one_line(exc))
        raise


def _begin(cfg: LoadConfig, pipeline: str, context) -> bool:
    refuse_unknown_params(context)
    params = context["params"]
    interval = load_interval(params, context)
    lid = load_id(pipeline, context)
    conns = from_airflow(cfg.log_conn_id, cfg.conn_ids())
    mode = params.get("mode", "append")
    try:
        spec = LoadSpec(
            load_id=lid, pipeline=pipeline, run_id=context["run_id"], dag_id=context["dag"].dag_id,
            targets=tuple(t.core(mode, (interval.start, interval.end), cfg.core_connection(t)) for t in cfg.targets),
            # A load of a source that continues its loads is exactly once per source, not per
            # data interval (ADR 0010); an interval's folder keeps loads once per interval.
            data_interval=(None if cfg.source and not cfg.source.per_interval
                           else (interval.start.isoformat(), interval.end.isoformat())),
            input=cfg.describe_input(interval, params, lid) if cfg.describe_input else {},
            source=cfg.source.core(pipeline, cfg.core_connection(cfg.source), interval) if cfg.source else None,
        )
    except SpecError as exc:
        raise AirflowFailException(f"the load is described wrongly: {exc}") from None
    try:
        with log_database(cfg.log_conn_id, conns.pg_dsn):
            for conn_id, ddl in cfg.ddl:
                dsn = conns.pg_dsn if conn_id == cfg.log_conn_id else conns.named[conn_id][1]
                with closing(psycopg2.connect(dsn)) as conn, conn, conn.cursor() as cur, creating(cur):
                    cur.execute(ddl)
            load = coordinator.begin(PostgresLog(conns.pg_dsn), spec, conns,
                                     empty=cfg.source.empty if cfg.source else "load")
    except (coordinator.AlreadyCommitted, coordinator.NothingToRead) as exc:
        context["ti"].xcom_push(key=NOTHING_TO_DO, value=str(exc))
        log.info("nothing to do: %s", exc)
        return False
    except (coordinator.IntervalBusy, coordinator.SourceBusy) as exc:
        raise AirflowFailException(f"cannot begin load {lid} for {_shown(interval)}: {exc}") from None
    except Terminal as exc:  # e.g. a source that cannot be read exactly once (SourceError): retries cannot help
        raise AirflowFailException(f"cannot begin load {lid}: {exc}") from None
    log.info("began load %s for %s, mode %s (state %s)", lid, _shown(interval), mode, load.state)
    for target in spec.targets:
        log.info("target %s (%s, mode %s)", target.name, target.kind, target.mode)
    if (commits_last := load.spec().describe_last_resource()):
        log.info("%s", commits_last)
    if mode == "replace":
        replaces = ", ".join(load.spec().replaces) or "no committed load"
        log.info("replace mode: the interval's rows are swapped atomically at commit; replaces %s", replaces)
    if spec.source is not None:
        log.info("source: %s", spec.source.describe(Range.from_json(load.source_range)))
    else:
        log.info("input: %s", load.input)
    return True


def _shown(interval: Interval) -> str:
    """A day as 2026-11-20; another interval as its two ends."""
    if interval.end - interval.start == timedelta(days=1) and interval.start.time() == time(0):
        return interval.day.isoformat()
    return f"{interval.start.isoformat()} .. {interval.end.isoformat()}"


def refuse_unknown_params(context) -> None:
    """Refuse trigger (conf) keys the DAG does not declare as params.

    Airflow validates only declared params when a run is created: an unknown key becomes
    a param without a schema, so a misspelt gate (`max_rejected_shar`) would be ignored
    and the default gate would apply. There is no DAG-level hook to refuse it at trigger
    time, so begin does, first thing, before anything is logged or staged.
    """
    known = sorted(context["dag"].params)
    conf = context["dag_run"].conf or {}
    unknown = sorted(k for k in conf if k not in known)
    if unknown:
        keys = ", ".join(repr(k) for k in unknown)
        raise AirflowFailException(f"unknown trigger parameter{'s' if len(unknown) > 1 else ''} {keys}; known: "
                                   f"{', '.join(known)}. Correct the key and trigger again")


def audit(cfg: LoadConfig, pipeline: str, context) -> str:
    """Measure the pipeline's audit rules on the staged data; log the report; its verdict
    is stored with the load for the vote. Returns the verdict ('none': nothing to audit)."""
    lid, conns, txlog = the_load(cfg, pipeline, context)
    with airflow_outcome("audit", lid):
        report = audit_step.audit(txlog, conns, lid, cfg.rules, cfg.quarantine_cap)
    if report is None:
        log.info("nothing to audit: load %s is %s", lid, txlog.get(lid).state)
        return "none"
    for line in report.lines():
        (log.warning if report.verdict != PASS else log.info)("%s", line)
    if report.verdict != PASS:
        log.info("staged rows failing a rule are in the quarantine: python -m twophase show %s --rejected", lid)
    log.info("the report as JSON: python -m twophase show %s --audit", lid)
    return report.verdict


def vote(cfg: LoadConfig, pipeline: str, context, commit_task: str, rollback_task: str) -> str:
    """Gather the votes, apply the quality gates, log the decision durably, branch."""
    lid, conns, txlog = the_load(cfg, pipeline, context)
    try:
        with log_database(cfg.log_conn_id, conns.pg_dsn):
            txlog.get(lid)
    except UnknownLoad:
        raise AirflowSkipException(f"no load {lid} was begun ({_begin_said(context)}), "
                                   "so there is nothing to vote on") from None
    except ServerUnreachable:
        # Begin failed and the log cannot be read: most likely no load was begun (a load an
        # earlier begin attempt logged is resolved by twophase_recovery). Finish says why.
        if context["ti"].xcom_pull(task_ids=BEGIN_TASK, key=REFUSED):
            raise AirflowSkipException(f"begin failed ({_begin_said(context)}): nothing to vote on") from None
        raise
    params = context["params"]
    rules = quality_gates(params)
    asked = bool(params.get("approval"))
    with airflow_outcome("vote", lid):
        load = coordinator.vote(txlog, conns, lid, rules, gates=[AuditGate(required=True), ApprovalGate(required=asked)])
    for v in txlog.votes(lid).values():
        log.info("vote of %s: %s, %d staged%s; %s", v.participant, "YES" if v.yes else "NO", v.count,
                 f" ({v.reason})" if v.reason else "", v.summary or v.committable)
    if load.expected_rows is not None:
        log.info("Spark computed %d rows; job metrics: %s", load.expected_rows, load.metrics or "none")
    log.info("quality gates: min_rows=%s, max_rejected_share=%s, max_skipped_files=%s", rules[0].minimum,
             rules[1].maximum, rules[2].maximum)
    log.info("approval: %s", approval.describe(load.approval) if asked else "not asked (param approval is off)")
    if load.state == State.VIOLATED:
        raise AirflowFailException(f"load {lid} is VIOLATED: {load.reason}")
    if (commits_last := load.spec().describe_last_resource()):
        log.info("%s", commits_last)
    if load.state in (State.COMMITTING, State.COMMITTED):
        log.info("DECISION: COMMIT (logged durably for load %s)", lid)
        return commit_task
    log.warning("DECISION: ABORT (logged durably for load %s): %s", lid, load.reason)
    return rollback_task


def quality_gates(params: dict) -> list:
    """The run's quality gates (its trigger params), as the vote applies them."""
    return [MinRows(int(params.get("min_rows", 1))), MaxRejectedShare(float(params.get("max_rejected_share", 1.0))),
            MaxSkippedFiles(int(params.get("max_skipped_files", 0)))]


def commit(cfg: LoadConfig, pipeline: str, context, assets) -> None:
    """Phase 2, COMMIT: every participant in commit order; emits the assets."""
    lid, conns, txlog = the_load(cfg, pipeline, context)
    with airflow_outcome("commit", lid):
        outcomes = coordinator.commit(txlog, conns, lid)
    _log_outcomes("commit", outcomes)
    load = txlog.get(lid)
    counts = _counts(txlog.votes(lid).values())
    log.info("COMMITTED load %s: %s (readers see all of it now)", lid,
             ", ".join(f"{n} in {target}" for target, n in counts.items()))
    _log_exposure(load)
    if load.approval:
        log.info("%s; the data was visible %.3f s after the approval", approval.describe(load.approval),
                 approval.to_visible_s(load.approval, load.finished_at))
    extra = {"load_id": lid, "counts": counts, "data_interval_start": str(load.data_interval_start),
             "mode": context["params"].get("mode", "append"), "audit": audit_summary(load.audit)}
    for asset in assets:
        context["outlet_events"][asset].extra = extra


def rollback(cfg: LoadConfig, pipeline: str, context) -> None:
    """Phase 2, ABORT: discard everything the load staged and say what and why."""
    lid, conns, txlog = the_load(cfg, pipeline, context)
    before = txlog.get(lid)
    log.warning("rolling back load %s; reason: %s", lid, before.reason or "prepare did not finish")
    with airflow_outcome("rollback", lid):
        outcomes = coordinator.rollback(txlog, conns, lid, reason="rolled back by the rollback task")
    _log_outcomes("rollback", outcomes)
    votes = txlog.votes(lid)
    staged = ", ".join(f"{n} for {target}" for target, n in _counts(votes.values()).items()) or "nothing staged"
    targets = ", ".join(p.targets[0] if len(p.targets) == 1 else ", ".join(p.targets)
                        for p in conns.participants(before.spec()))
    log.warning("ROLLED BACK load %s: discarded what was staged (%s); nothing reached %s", lid, staged, targets)
    _log_rejected(txlog, before)
    log.info("the input is untouched: %s; fix the cause and run the load again", before.source or before.input)
    _log_exposure(txlog.get(lid))


def _log_rejected(txlog: TransactionLog, load, shown: int = 20) -> None:
    """What the load rejected, and where it is kept (quarantine.rejected_report)."""
    try:
        kept = txlog.quarantined(load.load_id, limit=shown + 1)
    except Exception as exc:  # noqa: BLE001 - the rollback is done; this is only its report
        log.warning("could not read the quarantine: %s", one_line(str(exc)))
        kept = []
    for line in quarantine.rejected_report(load.load_id, load.metrics, load.input, kept, shown):
        log.warning("%s", line)


def _log_exposure(load) -> None:
    """How long the load held anything on its targets (locks, a prepared transaction)."""
    if load.exposed_at is None:
        log.info("exposure window: none (no participant was made ready, nothing was held on a target)")
    elif load.finished_at is not None:
        log.info("exposure window: %.3f s (from the vote making participants ready to the end of phase 2)",
                 (load.finished_at - load.exposed_at).total_seconds())


def finish(cfg: LoadConfig, pipeline: str, context) -> None:
    """Say how the run ended; runs whatever happened before it (trigger rule ALL_DONE).

    Succeeds when the load COMMITTED, or when no load was begun because the day was
    already committed (begin's NOTHING_TO_DO) or the input did not land and the pipeline
    skips such a run (WaitForInput then="skip"). Fails the run otherwise, naming the
    reason: a rolled back or unresolved load, begin's refusal, input that did not land.
    A refused or rolled back load never shows as a green run.
    """
    lid, conns, txlog = the_load(cfg, pipeline, context)
    try:
        with log_database(cfg.log_conn_id, conns.pg_dsn):
            load = txlog.get(lid)
    except UnknownLoad:
        nothing_to_do = context["ti"].xcom_pull(task_ids=BEGIN_TASK, key=NOTHING_TO_DO)
        if nothing_to_do:
            log.info("nothing to do: %s", nothing_to_do)
            return
        not_landed = _not_landed(cfg, context)
        if not_landed and not_landed.get("then") == "skip":
            log.info("no load: %s (WaitForInput then='skip': the run ends without one)", not_landed["reason"])
            return
        said = not_landed["reason"] if not_landed else _begin_said(context)
        raise AirflowFailException(f"no load was begun: {said}") from None
    except ServerUnreachable as exc:
        if context["ti"].xcom_pull(task_ids=BEGIN_TASK, key=REFUSED):
            raise AirflowFailException(f"no load was begun: {_begin_said(context)}") from None
        raise AirflowFailException(f"the outcome of load {lid} cannot be read now: {exc}") from None
    _show(txlog, load, conns)
    if load.state == State.COMMITTED:
        log.info("load %s COMMITTED: %s rows; see `python -m twophase show %s`", lid, load.expected_rows, lid)
        return
    if load.state in TERMINAL:
        raise AirflowFailException(f"load {lid} ended {load.state}: {load.reason}")
    raise AirflowFailException(f"load {lid} did not finish: it is {load.state}"
                               f"{f' ({load.reason})' if load.reason else ''}; the twophase_recovery DAG resolves "
                               f"it (see `python -m twophase show {lid}`)")


def _show(txlog, load, conns) -> None:
    """The whole run's story in one place, the finish task's log: the load as `python -m
    twophase show` prints it. Never fails the task: it only tells."""
    try:
        text = show.render(show.facts(txlog, load, conns))
    except Exception as exc:  # noqa: BLE001 - the outcome below still stands
        log.warning("the load could not be shown here (%s); see `python -m twophase show %s`", one_line(str(exc)),
                    load.load_id)
        return
    log.info("load %s, as `python -m twophase show` prints it:\n%s", load.load_id, text)


def _not_landed(cfg: LoadConfig, context) -> dict | None:
    """What the wait_for_input task said when the input did not land; None when the
    pipeline does not wait for its input, or its input landed."""
    if cfg.input_wait is None:
        return None
    return context["ti"].xcom_pull(task_ids=WAIT_TASK, key=NOT_LANDED)


def _begin_said(context) -> str:
    """Why begin began no load, as it said in XCom (a crashed begin said nothing)."""
    return (context["ti"].xcom_pull(task_ids=BEGIN_TASK, key=REFUSED)
            or "begin failed without saying why (it may have been killed); see its log")


def _one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception as one line: our own failures as their message, others with their type."""
    text = str(exc).strip() or "no message"
    if not isinstance(exc, (AirflowFailException, ServerUnreachable, SpecError)):
        text = f"{type(exc).__name__}: {text}"
    return one_line(text, limit)


def _counts(votes) -> dict[str, int]:
    """Per target, what the votes staged."""
    return {target: n for v in votes for target, n in v.counts_or_total().items()}


def _log_outcomes(step: str, outcomes: list[Outcome]) -> None:
    if not outcomes:
        log.info("%s: an earlier attempt already finished it; nothing changed now", step)
    for outcome in outcomes:
        log.info("%s %s", step, outcome.describe())


