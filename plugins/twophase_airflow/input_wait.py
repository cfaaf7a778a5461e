"""The wait_for_input task: a run whose IntervalFolder has `wait=WaitForInput(...)` waits
for its folder to land before begin, deferred to Airflow's triggerer (a worker slot is
held only for the first look and for the verdict).

- landed at the first look: it passes at once and begin follows;
- not yet: the task defers to InputLanded, which looks every `every` until `up_to` after
  the first look; the run shows the task as deferred, and its log says what it waits for;
- not landed by then: `then="fail"` fails the task, so begin never runs and finish fails
  the run naming the folder and what is missing; `then="skip"` skips it, so the run's load
  tasks are skipped and finish ends the run green, saying why there was no load. Either
  way the reason is in this task's XCom (tasks.NOT_LANDED) for finish.

Begin then lists the folder as always: the wait only decides when; what the load reads is
fixed at begin (twophase.sources.files).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator, NoReturn

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from twophase.env_seconds import seconds
from twophase.errors import one_line
from twophase.sources import SourceError
from twophase.sources.files import FilesSource
from twophase.spec import SpecError

from . import tasks
from .config import LoadConfig

log = logging.getLogger("twophase")


def not_landed(folder: str, marker: str) -> str | None:
    """Why `folder` has not landed yet, or None (see FilesReader.not_landed)."""
    return FilesSource(folder, "interval").open().not_landed(marker)


class InputLanded(BaseTrigger):
    """Looks at `folder` every `every_seconds` until it has landed (event `landed`: true) or
    `deadline` (ISO, UTC) has passed (`landed`: false, with why). A listing that fails for
    good (it is a file, not a folder) ends it at once, with `error`."""

    def __init__(self, folder: str, marker: str, deadline: str, every_seconds: float) -> None:
        super().__init__()
        self.folder, self.marker, self.deadline, self.every_seconds = folder, marker, deadline, every_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"folder": self.folder, "marker": self.marker, "deadline": self.deadline,
                 "every_seconds": self.every_seconds})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = datetime.fromisoformat(self.deadline)
        while True:
            try:
                why = await asyncio.to_thread(not_landed, self.folder, self.marker)
            except SourceError as exc:
                yield TriggerEvent({"landed": False, "why": str(exc), "error": True})
                return
            except OSError as exc:  # its file system unreachable for now: look again later
                why = f"cannot be listed now: {one_line(str(exc), 300)}"
            if why is None:
                yield TriggerEvent({"landed": True})
                return
            left = (deadline - datetime.now(timezone.utc)).total_seconds()
            if left <= 0:
                yield TriggerEvent({"landed": False, "why": why})
                return
            await asyncio.sleep(min(self.every_seconds, left))


class WaitForInputOperator(BaseOperator):
    """The wait_for_input task of a load whose IntervalFolder waits (see the module doc)."""

    def __init__(self, *, load: LoadConfig, pipeline: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.load, self.pipeline = load, pipeline

    def execute(self, context) -> None:
        wait, folder = self.load.input_wait, self._folder(context)
        every = wait.every.total_seconds() if wait.every else seconds("TWOPHASE_INPUT_POLL_S", 60)
        deadline = datetime.now(timezone.utc) + wait.up_to
        try:
            why = not_landed(folder, wait.marker)
        except SourceError as exc:
            self._give_up(context, f"the input cannot be read: {exc}")
        if why is None:
            log.info("input landed: %s; begin follows", folder)
            return
        if wait.up_to <= timedelta(0):
            self._give_up(context, self._late(folder, why), wait.then)
        log.info("waiting for the input: %s: %s; looking every %s s until %s (%s), in the triggerer: no worker "
                 "is held meanwhile", folder, why, f"{every:g}", deadline.isoformat(timespec="seconds"),
                 _span(wait.up_to))
        self.defer(trigger=InputLanded(folder, wait.marker, deadline.isoformat(), every), method_name="resume")

    def resume(self, context, event: dict[str, Any]) -> None:
        folder = self._folder(context)
        if event.get("landed"):
            log.info("input landed: %s; begin follows", folder)
        elif event.get("error"):
            self._give_up(context, f"the input cannot be read: {event.get('why')}")
        else:
            self._give_up(context, self._late(folder, event.get("why") or "no reason given"), self.load.input_wait.then)

    def _folder(self, context) -> str:
        """The run's folder; a run that cannot name it (an unknown trigger key, a bad `date`,
        a bad URI) fails here at once, as its begin would."""
        try:
            tasks.refuse_unknown_params(context)
            interval = tasks.load_interval(context["params"], context)
            return self.load.source.core(self.pipeline, "", interval).folder
        except (AirflowFailException, SpecError) as exc:
            self._give_up(context, str(exc))

    def _late(self, folder: str, why: str) -> str:
        return f"the input did not land within {_span(self.load.input_wait.up_to)}: {folder}: {why}"

    @staticmethod
    def _give_up(context, reason: str, then: str = "fail") -> NoReturn:
        """Fail or skip the task; finish reads `reason` from its XCom (tasks.NOT_LANDED)."""
        context["ti"].xcom_push(key=tasks.NOT_LANDED, value={"then": then, "reason": reason})
        if then == "skip":
            log.warning("%s; no load for this run (WaitForInput then='skip')", reason)
            raise AirflowSkipException(reason)
        raise AirflowFailException(reason)


def _span(value: timedelta) -> str:
    total = int(value.total_seconds())
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return " ".join(f"{n} {unit}" for n, unit in ((hours, "h"), (minutes, "min"), (secs, "s")) if n) or "0 s"
