"""Why the log refuses a change: the load is unknown, in another state than the step
expects, or the change comes from a prepare attempt that is no longer the load's."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from ..errors import Terminal, Transient
from ..protocol.states import State


class UnknownLoad(Terminal, LookupError):
    pass


class StateConflict(Terminal):
    """The load is not in a state this step may start from (another actor moved it, or it
    ended): retrying the step cannot help."""

    def __init__(self, load_id: str, current: State, expected: Iterable[State]):
        names = ", ".join(str(s) for s in expected)
        super().__init__(f"load {load_id} is {current}, expected one of: {names}")
        self.load_id, self.current = load_id, current


class Superseded(StateConflict):
    """A prepare attempt is no longer the load's latest: a later attempt claimed the load
    (a retry started while this one still ran: a zombie Spark application), or the load
    was decided meanwhile. Nothing this attempt staged may count."""

    def __init__(self, load_id: str, attempt: int, latest: int, current: State):
        Terminal.__init__(self, (
            f"prepare attempt {attempt} of load {load_id} was superseded by attempt {latest} (a retry started while "
            f"it still ran); the load is {current}. This attempt's staging is discarded and never counts")
            if latest != attempt else (
            f"prepare attempt {attempt} of load {load_id} is too late: the load is {current}. This attempt's "
            "staging is discarded and never counts"))
        self.load_id, self.current, self.attempt, self.latest = load_id, current, attempt, latest


class DriverBusy(Transient):
    """Another process drives the load's phase 2 (its commit or rollback) and its lease
    has not ended: retry once it ended (the load is then finished, or its driver gone)."""

    def __init__(self, load_id: str, driver: str, until: datetime):
        super().__init__(f"load {load_id} is being driven by {driver} (lease until {until:%Y-%m-%d %H:%M:%S %Z}); "
                         "its commit or rollback runs there: retry after it")
        self.load_id, self.driver, self.until = load_id, driver, until


class LeaseLost(StateConflict):
    """A phase-2 driver's lease ended and another driver took the load over: this one's
    change is refused (the other finishes the load)."""

    def __init__(self, load_id: str, driver: str, holder: str | None, current: State):
        Terminal.__init__(self, f"load {load_id}: the lease of {driver} ended and "
                          f"{holder or 'no driver'} holds it now; the load is {current} and is left to that driver")
        self.load_id, self.current, self.driver, self.holder = load_id, current, driver, holder
