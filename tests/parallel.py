"""Tests run side by side (pytest-xdist workers), except those that must run alone.

Most tests share nothing: each has its own tables, topics, pipeline name and load ids, so
two workers running two of them at once see the same as one worker running both in turn.
A few cannot share the machine with anything else (a module marked `alone`, listed in
tests/conftest.py's ALONE_MODULES): they assert a time budget, which another test's Spark
job on the same two cores would eat into. They are handed out after every other test but
the cluster's, when the other workers run out of work anyway.

The workers agree through two lock files in the run's shared temporary folder (flock):

- `running`: every test holds it shared while it runs; a test that runs alone holds it
  exclusively, so it starts only once the running tests have ended, and none starts while
  it runs;
- `turnstile`: a test that runs alone takes it before it waits for `running`, and every
  other test passes through it before it takes `running` shared, so a test waiting to run
  alone is not starved by the tests that keep starting on the other workers.

Without xdist (one process) both are no-ops.
"""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class Locks:
    """The run's two lock files (see the module's docstring), for one worker."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.turnstile, self.running = folder / "turnstile.lock", folder / "running.lock"

    @contextmanager
    def together(self) -> Iterator[None]:
        """Run beside the other tests, once no test waits to run alone."""
        with open(self.turnstile, "a") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)   # waits while a test runs alone or waits to
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        with open(self.running, "a") as running:
            fcntl.flock(running, fcntl.LOCK_SH)
            yield                                   # the lock goes with the file's close

    @contextmanager
    def alone(self) -> Iterator[None]:
        """Run once every running test has ended, with none starting meanwhile."""
        with open(self.turnstile, "a") as turnstile, open(self.running, "a") as running:
            fcntl.flock(turnstile, fcntl.LOCK_EX)   # no test starts from now on
            fcntl.flock(running, fcntl.LOCK_EX)     # the running ones have ended
            yield
