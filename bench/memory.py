"""Peak resident memory (RSS) of the Spark driver JVM and the Python workers.

A background thread polls /proc every `interval` seconds for the bench process's
descendants: the JVM running SparkSubmit (the driver, with the local executor inside)
and the Python processes running pyspark.daemon / pyspark.worker (summed: they run side
by side; forked workers share some pages with the daemon, so the sum is an upper bound).
The bench process itself (Python driver: coordinator, producers' callbacks) is reported
too. `window()` gives the peaks seen while its block ran.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

KINDS = ("jvm", "workers", "py_driver")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _rss(pid: int) -> int:
    try:
        return int((Path(f"/proc/{pid}/statm")).read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _cmdline(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}/cmdline")).read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def sample(root: int) -> dict[str, int]:
    """RSS in bytes by kind, now, over root's process tree."""
    parents = _parents()
    tree, frontier = set(), {root}
    while frontier:
        tree |= frontier
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in tree}
    now = dict.fromkeys(KINDS, 0)
    now["py_driver"] = _rss(root)
    for pid in tree - {root}:
        cmd = _cmdline(pid)
        if "org.apache.spark.deploy.SparkSubmit" in cmd:
            now["jvm"] += _rss(pid)
        elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            now["workers"] += _rss(pid)
    return now


class Sampler:
    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self._peak: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        root = os.getpid()
        while not self._stop.wait(self.interval):
            with self._lock:
                if self._peak is None:
                    continue
            now = sample(root)
            with self._lock:
                if self._peak is not None:
                    for kind, value in now.items():
                        self._peak[kind] = max(self._peak[kind], value)

    @contextmanager
    def window(self):
        """Yields a dict filled, when the block ends, with the peak RSS (bytes) by kind."""
        peaks: dict[str, int] = {}
        with self._lock:
            self._peak = sample(os.getpid())
        try:
            yield peaks
        finally:
            last = sample(os.getpid())
            with self._lock:
                peaks.update({k: max(v, last[k]) for k, v in self._peak.items()})
                self._peak = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
