"""One driver per phase 2: a step that commits or rolls back a load (the pipeline's task,
a retry of it, recovery) first claims the load's lease in the log, renews it while it
runs, and releases it when it ends; every state change it makes names it, and the log
refuses the change once another driver took the lease over (LeaseLost).

A second step meanwhile gets DriverBusy and leaves the load to the first. A driver that
dies stops renewing: its lease ends `TWOPHASE_DRIVER_LEASE_S` seconds (default 60) after
its last renewal, and the next step takes the load over; at once, when it runs on the
same machine and finds the driver's process gone (a driver's name says which process it
is: host, pid, and the boot, pid namespace and start time that make the pid unique).

A driver that stalls longer than its lease (a frozen process) can still be acting on a
participant while the next one starts: each participant's own fencing (a prepared
transaction's gid, the Kafka copy's transactional id, Iceberg's snapshot check) keeps that
from acting twice (the contract suite commits from two drivers at once), and the stalled
driver's next state change is refused.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import uuid
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Iterator

from ..env_seconds import seconds
from ..log import DriverBusy, TransactionLog

# "<host> pid <pid> step <nonce> [<boot id>:<pid namespace>:<start time>]"
_PROCESS = re.compile(r" pid (\d+) step \w+ \[(\w+):(\d+):(\d+)\]$")


def length() -> timedelta:
    """How long a lease lasts without renewal (TWOPHASE_DRIVER_LEASE_S, default 60 s)."""
    return timedelta(seconds=seconds("TWOPHASE_DRIVER_LEASE_S", 60))


def claim(log: TransactionLog, load_id: str, lease: timedelta | None = None) -> str:
    """Become the load's driver: its name (host, process, a nonce of this step).
    DriverBusy while another driver's lease lasts and its process may be alive;
    StateConflict when the load is not decided-and-unfinished (COMMITTING or ABORTING)."""
    machine, started = _machine(), _started(os.getpid())
    driver = f"{socket.gethostname()} pid {os.getpid()} step {uuid.uuid4().hex[:8]}"
    if machine and started:
        driver += f" [{machine}:{started}]"
    try:
        log.claim_driver(load_id, driver, lease or length())
    except DriverBusy as busy:
        if not gone(busy.driver):
            raise
        log.claim_driver(load_id, driver, lease or length(), dead=busy.driver)
    return driver


def gone(driver: str) -> bool:
    """The driver's process has ended: it ran on this machine, in this pid namespace, and
    no process of its pid and start time exists. False when that cannot be told (another
    machine, a name of another form, no /proc)."""
    found = _PROCESS.search(driver)
    if found is None or _machine() is None:
        return False
    pid, boot, namespace, started = found.groups()
    return f"{boot}:{namespace}" == _machine() and _started(int(pid)) != started


def _machine() -> str | None:
    """What makes a pid unique besides its start time: this boot, this pid namespace."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:12]
        namespace = re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))
    except OSError:
        return None
    return f"{boot}:{namespace}"


def _started(pid: int) -> str | None:
    """The process's start time (clock ticks after boot); None when there is none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


@contextmanager
def held(log: TransactionLog, load_id: str, driver: str, lease: timedelta | None = None) -> Iterator[None]:
    """While the block runs, renew the claimed lease every third of its length (a thread);
    release it when the block ends. A renewal that fails (the log's server down) is tried
    again at the next turn; one that finds the lease gone stops: the driver's next state
    change raises LeaseLost."""
    lease = lease or length()
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(max(lease.total_seconds() / 3, 0.05)):
            try:
                if not log.renew_driver(load_id, driver, lease):
                    return
            except Exception:  # noqa: BLE001 - the lease may end meanwhile; the log says so at the next change
                continue

    renewer = threading.Thread(target=renew, name=f"lease of {load_id}", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        try:
            log.release_driver(load_id, driver)
        except Exception:  # noqa: BLE001 - it ends by itself when its time is up
            pass
