"""Starting, finding and stopping the stack's own background processes.

Each process the stack starts has a pid file in the stack folder; `down` stops only
processes named by those files, and only when the pid still runs the expected program.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable


class StackError(RuntimeError):
    """A stack step failed; the message says what and where to look."""


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a command to completion; on failure raise with its output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise StackError(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
        )
    return proc


def start_detached(cmd: list[str], pidfile: Path, logfile: Path, env: dict | None = None) -> int:
    """Start cmd in its own session, output appended to logfile; record its pid."""
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env,
        )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def running_pid(pidfile: Path, expect_in_cmdline: str | tuple[str, ...]) -> int | None:
    """The pid recorded in pidfile if that process is alive and is what we started
    (its command line holds `expect_in_cmdline`, or one of them: some programs retitle
    themselves)."""
    try:
        pid = int(pidfile.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, ValueError, IndexError):
        return None
    expected = (expect_in_cmdline,) if isinstance(expect_in_cmdline, str) else expect_in_cmdline
    return pid if any(e in cmdline for e in expected) else None


def port_open(port: int) -> bool:
    """True when something listens on 127.0.0.1:port."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop_pid(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it has not exited within timeout."""
    stop_pids([pid], timeout)


def stop_pids(pids: list[int], timeout: float = 30.0) -> None:
    """SIGTERM the process groups all at once, then SIGKILL those that have not exited
    within timeout. (Nodes of a cluster stop together: one at a time, the last waits for a
    quorum that has gone, until it is killed.)"""
    signalled = []
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
            signalled.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        signalled = [pid for pid in signalled if Path(f"/proc/{pid}").exists() and not _is_zombie(pid)]
        if not signalled:
            return
        time.sleep(0.2)
    for pid in signalled:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def wait_until(check: Callable[[], bool], timeout: float, what: str, logfile: Path | None = None) -> None:
    """Poll check() until it returns True; raise naming `what` and the log on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    hint = f"; see {logfile}" if logfile else ""
    tail = ""
    if logfile and logfile.exists():
        tail = "\n--- last lines of the log ---\n" + "\n".join(logfile.read_text(errors="replace").splitlines()[-20:])
    raise StackError(f"{what} did not become ready within {timeout:.0f} s{hint}{tail}")
