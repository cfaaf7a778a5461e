"""A background poller for the tests that watch the targets while a load commits."""

from __future__ import annotations

import threading
import time


class Poller(threading.Thread):
    """Calls poll() in a loop until stopped; keeps (start time, result) of each call."""

    def __init__(self, name: str, poll):
        super().__init__(name=name, daemon=True)
        self._poll, self._halt = poll, threading.Event()
        self.samples: list[tuple[float, object]] = []
        self.error: BaseException | None = None

    def run(self):
        try:
            while not self._halt.is_set():
                started = time.monotonic()
                self.samples.append((started, self._poll()))
        except BaseException as exc:  # the test checks `error`
            self.error = exc

    def stop(self) -> None:
        """Stop polling and wait for the thread; a poll's error stays in `error`."""
        self._halt.set()
        if self.ident is not None:
            self.join(60)
            assert not self.is_alive(), f"poller {self.name} did not stop"


def wait_for(condition, what: str, pollers=(), timeout: float = 60.0) -> None:
    """Wait until condition() holds; fail at once if one of `pollers` failed."""
    deadline = time.monotonic() + timeout
    while not condition():
        for poller in pollers:
            assert poller.error is None, f"the {poller.name} poller failed: {poller.error!r}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
