"""Waiting for late input (twophase_airflow.input_wait): what counts as landed, the
trigger's looks until its deadline, the task's verdicts (pass, defer, fail or skip, and
what it tells finish), the settings' refusals and the factory's graph. A real temporary
folder; the trigger's sleeps are the test's, so no test waits on a clock."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pendulum
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred

from twophase.sources import SourceError
from twophase.spec import SpecError
from twophase_airflow import IntervalFolder, LoadConfig, Table, WaitForInput, load_params, two_phase_load
from twophase_airflow import input_wait, tasks
from twophase_airflow.input_wait import InputLanded, WaitForInputOperator, not_landed

HOUR = (datetime(2026, 11, 20, 5, tzinfo=timezone.utc), datetime(2026, 11, 20, 6, tzinfo=timezone.utc))


def events(trigger: InputLanded) -> list[dict]:
    async def collect():
        return [e.payload async for e in trigger.run()]
    return asyncio.run(collect())


def folder_of(root):
    return lambda interval: str(root / f"date={interval.day}")


def test_a_folder_has_landed_once_it_exists_and_holds_its_marker(tmp_path):
    day = tmp_path / "date=2026-11-20"
    assert not_landed(str(day), "") == "the folder does not exist yet"
    day.mkdir()
    assert not_landed(str(day), "") is None
    assert not_landed(str(day), "_SUCCESS").startswith("the folder has no _SUCCESS yet")
    (day / "_SUCCESS").write_text("")
    assert not_landed(str(day), "_SUCCESS") is None
    (tmp_path / "plain").write_text("x")
    with pytest.raises(SourceError, match="a file, not a folder"):
        not_landed(str(tmp_path / "plain"), "")


@pytest.mark.parametrize("settings, named", [
    ({"up_to": timedelta(-1)}, "up_to"), ({"up_to": 3600}, "up_to"), ({"then": "wait"}, "then"),
    ({"marker": "a/_SUCCESS"}, "marker"), ({"marker": ".."}, "marker"), ({"every": timedelta(0)}, "every"),
])
def test_wrong_settings_are_refused_naming_the_setting(settings, named):
    with pytest.raises(SpecError, match=f"WaitForInput {named}"):
        WaitForInput(**{"up_to": timedelta(hours=1), **settings})
    with pytest.raises(SpecError, match="IntervalFolder wait"):
        IntervalFolder(lambda i: "/x", wait=timedelta(hours=1))


def test_the_trigger_looks_every_period_until_the_folder_lands(tmp_path, monkeypatch):
    day, slept = tmp_path / "date=2026-11-20", []

    async def sleep(seconds):  # the folder lands during the third wait
        slept.append(seconds)
        if len(slept) == 3:
            day.mkdir()

    monkeypatch.setattr(input_wait.asyncio, "sleep", sleep)
    deadline = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    assert events(InputLanded(str(day), "", deadline, 30.0)) == [{"landed": True}]
    assert slept == [30.0, 30.0, 30.0]


def test_the_trigger_looks_again_when_the_file_system_does_not_answer(tmp_path, monkeypatch):
    answers = iter([OSError("connection reset"), None])

    def flaky(folder, marker):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def sleep(seconds):
        pass

    monkeypatch.setattr(input_wait, "not_landed", flaky)
    monkeypatch.setattr(input_wait.asyncio, "sleep", sleep)
    deadline = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    assert events(InputLanded(str(tmp_path), "", deadline, 30.0)) == [{"landed": True}]


def test_the_trigger_gives_up_at_its_deadline_with_why(tmp_path, monkeypatch):
    slept = []

    async def sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr(input_wait.asyncio, "sleep", sleep)
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    assert events(InputLanded(str(tmp_path / "missing"), "", past, 30.0)) == [
        {"landed": False, "why": "the folder does not exist yet"}]
    assert slept == []
    (tmp_path / "plain").write_text("x")
    [event] = events(InputLanded(str(tmp_path / "plain"), "", past, 30.0))
    assert event["error"] and "a file, not a folder" in event["why"]


def test_the_trigger_round_trips_through_its_serialized_form(tmp_path):
    trigger = InputLanded(str(tmp_path), "_SUCCESS", "2026-11-20T08:00:00+00:00", 5.0)
    path, kwargs = trigger.serialize()
    assert path == "twophase_airflow.input_wait.InputLanded"
    assert InputLanded(**kwargs).serialize() == (path, kwargs)


class TaskInstance:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def operator(root, **wait) -> WaitForInputOperator:
    config = LoadConfig(targets=[Table("analytics.t")],
                        source=IntervalFolder(folder_of(root), wait=WaitForInput(**{"up_to": timedelta(hours=2),
                                                                                    **wait})))
    return WaitForInputOperator(task_id=tasks.WAIT_TASK, load=config, pipeline="p")


def context(conf=None) -> dict:
    return {"params": {}, "dag": SimpleNamespace(params={"mode": None}), "dag_run": SimpleNamespace(conf=conf or {}),
            "ti": TaskInstance(), "data_interval_start": HOUR[0], "data_interval_end": HOUR[1]}


def test_landed_input_passes_at_once(tmp_path):
    (tmp_path / "date=2026-11-20").mkdir()
    ctx = context()
    assert operator(tmp_path).execute(ctx) is None
    assert ctx["ti"].pushed == {}


def test_missing_input_defers_to_the_trigger_until_up_to_after_the_first_look(tmp_path, monkeypatch):
    monkeypatch.setenv("TWOPHASE_INPUT_POLL_S", "7")
    before = datetime.now(timezone.utc)
    with pytest.raises(TaskDeferred) as deferred:
        operator(tmp_path, marker="_SUCCESS").execute(context())
    trigger = deferred.value.trigger
    assert deferred.value.method_name == "resume"
    assert (trigger.folder, trigger.marker, trigger.every_seconds) == (
        f"file://{tmp_path}/date=2026-11-20", "_SUCCESS", 7.0)
    deadline = datetime.fromisoformat(trigger.deadline)
    assert before + timedelta(hours=2) <= deadline <= datetime.now(timezone.utc) + timedelta(hours=2)
    with pytest.raises(TaskDeferred) as deferred:
        operator(tmp_path, every=timedelta(seconds=2)).execute(context())
    assert deferred.value.trigger.every_seconds == 2.0


@pytest.mark.parametrize("then, raised", [("fail", AirflowFailException), ("skip", AirflowSkipException)])
def test_input_that_never_landed_fails_or_skips_and_tells_finish_why(tmp_path, then, raised):
    ctx = context()
    with pytest.raises(raised, match="did not land within 2 h: .*date=2026-11-20: the folder does not exist yet"):
        operator(tmp_path, then=then).resume(ctx, {"landed": False, "why": "the folder does not exist yet"})
    told = ctx["ti"].pushed[tasks.NOT_LANDED]
    assert told["then"] == then and "did not land within 2 h" in told["reason"]
    ctx = context()  # a zero wait looks once, without deferring
    with pytest.raises(raised, match="did not land within 0 s"):
        operator(tmp_path, then=then, up_to=timedelta(0)).execute(ctx)


def test_what_cannot_be_read_fails_even_a_skipping_wait(tmp_path):
    ctx = context()
    with pytest.raises(AirflowFailException, match="cannot be read: .*a file, not a folder"):
        operator(tmp_path, then="skip").resume(ctx, {"landed": False, "why": "x: it is a file, not a folder",
                                                     "error": True})
    assert ctx["ti"].pushed[tasks.NOT_LANDED]["then"] == "fail"
    ctx = context(conf={"mode_": "append"})  # an unknown trigger key fails at once, as begin would
    with pytest.raises(AirflowFailException, match="unknown trigger parameter 'mode_'"):
        operator(tmp_path, then="skip").execute(ctx)
    assert "unknown trigger parameter" in ctx["ti"].pushed[tasks.NOT_LANDED]["reason"]


def test_the_factory_puts_the_wait_before_begin_only_when_the_source_waits(tmp_path):
    def build(source):
        with DAG("waits", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), params=load_params()):
            return two_phase_load(LoadConfig(targets=[Table("analytics.t")], source=source), application="job.py")

    waits = build(IntervalFolder(folder_of(tmp_path), wait=WaitForInput(up_to=timedelta(hours=1))))
    assert waits.wait_for_input.task_id == tasks.WAIT_TASK
    assert waits.begin.operator.upstream_task_ids == {tasks.WAIT_TASK}
    assert build(IntervalFolder(folder_of(tmp_path))).wait_for_input is None


def test_a_run_without_a_data_interval_of_a_pipeline_without_days_is_refused_naming_the_timetable(tmp_path):
    ctx = {**context(), "data_interval_start": HOUR[1], "data_interval_end": HOUR[1]}  # a CronTriggerTimetable's run
    with pytest.raises(AirflowFailException, match="no data interval to load: .*CronDataIntervalTimetable"):
        operator(tmp_path).execute(ctx)
    assert "CronTriggerTimetable" in ctx["ti"].pushed[tasks.NOT_LANDED]["reason"]
    daily = {**ctx, "params": {"date": None}}  # a daily pipeline's manual run: yesterday, as before
    assert tasks.load_interval(daily["params"], daily).end - tasks.load_interval(daily["params"], daily).start == \
        timedelta(days=1)
