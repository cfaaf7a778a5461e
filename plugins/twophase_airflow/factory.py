"""The DAG factory: a two-phase load as tasks whose graph is the protocol.

    [wait_for_input ->] begin -> prepare -> audit -> approve -> vote -> commit | rollback -> finish

- wait_for_input (only when the source is an IntervalFolder with `wait`): waits, deferred
  to the triggerer, for the run's folder to land; not landed in time, it fails or skips
  the run as configured (input_wait.py).
- begin (short-circuit): refuses unknown trigger keys, logs the load; when the day is
  already committed in append mode (exactly once per day) it says "nothing to do" and
  skips prepare, and through the trigger rules below vote, commit and rollback too.
- prepare: spark-submit of the pipeline's job (TwoPhasePrepareOperator).
- audit: the pipeline's audit rules (LoadConfig.rules) measured on the staged data; the
  report is stored with the load and logged. Runs only when prepare succeeded.
- approve: when the run's param `approval` is on, a person approves or rejects the
  audited load (Airflow's human-in-the-loop ApprovalOperator; LoadApprovalOperator); no
  answer within `approval_timeout_minutes` rejects it. Off: passes at once. Nothing is
  held on any target while it waits.
- vote (branch, trigger rule NONE_SKIPPED): runs when prepare and audit succeeded, failed
  or could not run because begin failed; skipped only when begin short-circuited. Reads
  the audit's verdict (no report: abort) and, when the run asked for one, the approval
  (rejected, timed out or missing: abort), makes the participants ready, decides and
  picks commit or rollback (or skips both when no load was begun).
- commit: emits one Asset per target (table or topic), with the load id and the
  per-target counts in the event's extra.
- rollback: discards what was staged; its log says what and why.
- finish (trigger rule ALL_DONE, the only leaf): always runs and says how the run ended.
  It succeeds only when the load COMMITTED or begin found nothing to do, and fails the
  run otherwise (rolled back, refused by begin, unresolved), naming the reason, so a
  refusal or a rollback never shows as a green run.

Use it inside a DAG:

    with DAG("my_load", params=load_params(), schedule="@daily", ...):
        two_phase_load(config, application="spark_jobs/my_job.py")
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from airflow.sdk import Param, TriggerRule, get_current_context, task

from twophase.env_seconds import seconds
from twophase.participants.target_rules import WRITE_MODES
from twophase.spec import SpecError

from . import tasks
from .approval_operator import LoadApprovalOperator
from .config import LoadConfig, check_pipeline
from .input_wait import WaitForInputOperator
from .kinds import asset_of
from .prepare_operator import TwoPhasePrepareOperator


def load_params(min_rows: int = 1, max_rejected_share: float = 0.05, mode: str = "append",
                max_skipped_files: int = 0, approval_timeout_minutes: float = 60,
                pick_day: bool = True) -> dict[str, Param]:
    """The trigger form every two-phase load understands: the day, the gates, the mode.

    `pick_day`: the form has a `date` field, to load a given day (a daily pipeline). False
    for a pipeline whose interval is not a day (hourly, weekly, none): each run loads its
    own data interval, and a given interval is loaded by a run with its logical date.

    These are also the only trigger (conf) keys begin accepts: it refuses any other key,
    so a misspelt gate cannot silently fall back to its default. Add a param here (or to
    the DAG's params) and begin accepts its key.
    """
    if mode not in WRITE_MODES:
        raise SpecError(f"load_params mode {mode!r} is not one of {', '.join(WRITE_MODES)}")
    what = "day" if pick_day else "interval"
    day = {"date": Param(None, type=["null", "string"], format="date", title="Data date",
                         description="The day to load (YYYY-MM-DD). Empty: the run's data interval, "
                                     "or yesterday for a manual run.")} if pick_day else {}
    return {
        **day,
        "min_rows": Param(min_rows, type="integer", minimum=0, title="Minimum rows",
                          description="Quality gate: the vote aborts a load with fewer result rows."),
        "max_rejected_share": Param(max_rejected_share, type="number", minimum=0, maximum=1,
                                    title="Maximum rejected share",
                                    description="Quality gate: the vote aborts when a larger share of input "
                                                "lines was rejected (0..1; 1 turns the gate off)."),
        "max_skipped_files": Param(max_skipped_files, type="integer", minimum=0, title="Maximum files not read",
                                   description="Quality gate: the vote aborts when the job left more non-empty "
                                               "input files unread (hidden names, subfolders); the job lists "
                                               "them in the prepare log."),
        "mode": Param(mode, type="string", enum=list(WRITE_MODES), title="Write mode",
                      description=f"append: load the {what} once (a committed {what} is not loaded again). "
                                  f"replace: swap the {what}'s rows atomically for the new load's."),
        "approval": Param(False, type="boolean", title="Ask for approval",
                          description="A person approves or rejects the audited load (the approve task's "
                                      "Required Actions) before the vote; nothing is held on the targets meanwhile."),
        "approval_timeout_minutes": Param(approval_timeout_minutes, type="number", minimum=0.1, maximum=7 * 24 * 60,
                                          title="Approval timeout (minutes)",
                                          description="With approval on: no answer within this time rejects "
                                                      "the load (it is rolled back). Fractions count: 0.5 is "
                                                      "30 seconds."),
    }


@dataclass(frozen=True)
class TwoPhaseTasks:
    begin: object
    prepare: object
    audit: object
    approve: object
    vote: object
    commit: object
    rollback: object
    finish: object
    wait_for_input: object = None  # only when the source waits for its input


def default_retry_delay() -> timedelta:
    """The tasks' retry delay when the DAG gives none: TWOPHASE_RETRY_DELAY_S, default 30 s."""
    return timedelta(seconds=seconds("TWOPHASE_RETRY_DELAY_S", 30, zero_allowed=True))


def two_phase_load(config: LoadConfig, application: str, *, application_args: list[str] | None = None,
                   spark_conf: dict | None = None, commit_retries: int = 3,
                   retry_delay: timedelta | None = None) -> TwoPhaseTasks:
    """Add the tasks of one two-phase load to the DAG being defined; returns them.
    `retry_delay`: how long a task waits before its retry (a server down, a lease held);
    default TWOPHASE_RETRY_DELAY_S seconds, else 30."""
    retry_delay = retry_delay if retry_delay is not None else default_retry_delay()
    context_dag_id = _current_dag_id()
    pipeline = config.pipeline or context_dag_id
    check_pipeline(pipeline, f"pipeline name (the DAG id {context_dag_id!r} unless LoadConfig.pipeline is set)")
    outlets = [asset_of(t) for t in config.targets]

    # ignore_downstream_trigger_rules=False: "nothing to do" skips prepare only; the later
    # tasks follow their trigger rules, so finish still runs and says so.
    @task.short_circuit(task_id=tasks.BEGIN_TASK, retries=2, retry_delay=retry_delay,
                        ignore_downstream_trigger_rules=False)
    def begin() -> bool:
        return tasks.begin(config, pipeline, get_current_context())

    prepare = TwoPhasePrepareOperator(
        task_id="prepare", load=config, pipeline=pipeline, application=application,
        application_args=application_args, conf=spark_conf, name=f"twophase-{pipeline}", retries=0)

    # Runs only after prepare succeeded; the vote runs either way and aborts a load
    # without an audit report.
    @task(task_id="audit", retries=2, retry_delay=retry_delay)
    def audit() -> str:
        return tasks.audit(config, pipeline, get_current_context())

    approve = LoadApprovalOperator(task_id="approve", load=config, pipeline=pipeline, retries=2,
                                   retry_delay=retry_delay)

    @task(task_id="commit", outlets=outlets, retries=commit_retries, retry_delay=retry_delay)
    def commit() -> None:
        tasks.commit(config, pipeline, get_current_context(), outlets)

    @task(task_id="rollback", retries=commit_retries, retry_delay=retry_delay)
    def rollback() -> None:
        tasks.rollback(config, pipeline, get_current_context())

    commit_task, rollback_task = commit(), rollback()

    # NONE_SKIPPED: runs after prepare whatever its outcome (failed, or upstream_failed because
    # begin failed), but is skipped, with commit and rollback, when begin found nothing to do.
    @task.branch(task_id="vote", trigger_rule=TriggerRule.NONE_SKIPPED, retries=2, retry_delay=retry_delay)
    def vote() -> str:
        return tasks.vote(config, pipeline, get_current_context(),
                          commit_task.operator.task_id, rollback_task.operator.task_id)

    # ALL_DONE: the only leaf always runs, so the run's state is finish's verdict.
    @task(task_id="finish", trigger_rule=TriggerRule.ALL_DONE)
    def finish() -> None:
        tasks.finish(config, pipeline, get_current_context())

    begin_task, audit_task, vote_task, finish_task = begin(), audit(), vote(), finish()
    begin_task >> prepare >> audit_task >> approve >> vote_task >> [commit_task, rollback_task] >> finish_task
    waits = None
    if config.input_wait is not None:
        # Begin's own trigger rule (all upstream succeeded): a wait that fails or skips
        # skips or fails begin and what follows; finish says why.
        waits = WaitForInputOperator(task_id=tasks.WAIT_TASK, load=config, pipeline=pipeline, retries=2,
                                     retry_delay=retry_delay)
        waits >> begin_task
    return TwoPhaseTasks(begin_task, prepare, audit_task, approve, vote_task, commit_task, rollback_task, finish_task,
                         waits)


def _current_dag_id() -> str:
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    dag = DagContext.get_current()
    if dag is None:
        raise RuntimeError("two_phase_load() must be called inside a DAG definition (with DAG(...) or @dag)")
    return dag.dag_id
