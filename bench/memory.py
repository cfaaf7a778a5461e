"""Peak memory of every process a load runs on: the Spark driver JVM, the Python workers,
the bench's own Python process (the coordinator), the commit copy's JVM, the Kafka broker
and the Postgres servers.

A background thread polls /proc every `interval` seconds. Of the bench process's
descendants: the JVM running SparkSubmit (the driver, with the local executor inside), the
Python processes running pyspark.daemon / pyspark.worker (summed: they run side by side;
forked workers share some pages with the daemon, so the sum is an upper bound), and the
commit copy's JVM (StagedCopy). Of the machine: the Kafka broker (kafka.Kafka), and every
postgres process, summed as proportional set size (PSS: the shared buffers each backend
maps are counted once, not once per backend). The rest is resident set size (RSS).
`window()` gives the peaks seen while its block ran.

With `live_heap` (bench/run --live-heap), the Sampler also asks the Spark driver JVM for a
full collection every `live_every` seconds of a window and once at its end, and keeps the
heap in use right after it (LiveHeap): the peak of those readings (kind "jvm_live") and
their 90th percentile ("jvm_live_p90"), what the JVM holds live. Under G1 its RSS says
little of that: G1 leaves garbage in the old generation until a concurrent cycle, and grows
the heap towards spark.driver.memory the longer the allocation goes on, so a longer run
shows a larger RSS whatever it retains; the bench's driver therefore runs the serial
collector, whose heap follows what is live (bench/session.py). The live heap inside a pass
is a band (what the task threads hold at that instant), and the highest of a 20M load's 140
readings lands higher in it than the highest of a 1M load's ten: the percentile compares
the band at either size, the peak shows its top.
"""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
from contextlib import contextmanager
from pathlib import Path

KINDS = ("jvm", "workers", "py_driver", "copy_jvm", "kafka", "postgres")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, command name)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name, rest = stat.split(" (", 1)[1].rsplit(")", 1)
            found[int(entry.name)] = (int(rest.split()[1]), name)
    return found


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


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
    """Memory in bytes by kind, now: root's process tree, the broker, the Postgres servers."""
    processes = _processes()
    tree, frontier = set(), {root}
    while frontier:
        tree |= frontier
        frontier = {pid for pid, (parent, _) in processes.items() if parent in frontier and pid not in tree}
    now = dict.fromkeys(KINDS, 0)
    now["py_driver"] = _rss(root)
    for pid, (_, name) in processes.items():
        if name == "postgres":
            now["postgres"] += _pss(pid)
        elif name == "java":
            cmd = _cmdline(pid)
            if pid in tree and "org.apache.spark.deploy.SparkSubmit" in cmd:
                now["jvm"] += _rss(pid)
            elif pid in tree and "StagedCopy" in cmd:
                now["copy_jvm"] += _rss(pid)
            elif " kafka.Kafka " in cmd:
                now["kafka"] += _rss(pid)
        elif pid in tree and pid != root:
            cmd = _cmdline(pid)
            if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
                now["workers"] += _rss(pid)
    return now


def give_back() -> None:
    """Return this process's unused memory to the system: what an earlier contender freed
    but the allocators kept. The Iceberg contender's scan of 2M rows left 247 MB resident;
    given back, 81 MB."""
    import ctypes

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


# How often LiveHeap is asked during a window: often enough that a 1M load's staging pass
# (2-4 s) is sampled inside, as a long one's is; each ask is a full collection, tens of ms.
LIVE_EVERY_S = 1.0


class LiveHeap:
    """The Spark driver JVM's heap in use right after a full collection (System.gc()), in
    bytes, as that collection's own record gives it (the heap's pools after it): the JVM's
    task threads allocate on at once, so the heap's use read a moment later would count
    some of that too.

    A full collection can be put off: while a thread holds the GC locker (a JNI critical
    region: lz4's compression of a Kafka batch), the JVM skips the System.gc(), and the latest
    record is then a young collection's, garbage in the old generation and all (144 MB
    read so in a 20M staging pass whose full collections found 87-169 MB). So a reading
    counts only when the full collector's count went up; after `TRIES` asks without one,
    None (no reading)."""

    TRIES = 5

    def __init__(self, spark):
        jvm = spark.sparkContext._jvm
        self._system = jvm.java.lang.System
        factory = jvm.java.lang.management.ManagementFactory
        full = [c for c in factory.getGarbageCollectorMXBeans()
                if any(word in c.getName() for word in ("Old", "MarkSweep"))]
        if len(full) != 1:
            raise RuntimeError(f"no single full collector among the driver JVM's: "
                               f"{[c.getName() for c in factory.getGarbageCollectorMXBeans()]}")
        self._full = full[0]
        self._pools = [p.getName() for p in factory.getMemoryPoolMXBeans() if p.getType().name() == "HEAP"]

    def __call__(self) -> int | None:
        for _ in range(self.TRIES):
            before = self._full.getCollectionCount()
            self._system.gc()
            if self._full.getCollectionCount() > before:
                after = self._full.getLastGcInfo().getMemoryUsageAfterGc()
                return sum(after.get(pool).getUsed() for pool in self._pools if after.containsKey(pool))
            time.sleep(0.05)
        return None


class Sampler:
    def __init__(self, interval: float = 0.2, live_heap: LiveHeap | None = None, live_every: float = LIVE_EVERY_S):
        self.interval = interval
        self.live_heap, self.live_every = live_heap, live_every
        self._live_due = 0.0
        self._peak: dict[str, int] | None = None
        self._live: list[int] = []  # the window's live-heap readings
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
            if self.live_heap is not None and time.monotonic() >= self._live_due:
                self._live_due = time.monotonic() + self.live_every
                self._add_live_heap(now)
            with self._lock:
                if self._peak is not None:
                    for kind, value in now.items():
                        self._peak[kind] = max(self._peak.get(kind, 0), value)

    def _add_live_heap(self, sample_: dict[str, int]) -> None:
        """Adds the driver JVM's live heap to a sample, where a full collection ran (LiveHeap)."""
        live = self.live_heap() if self.live_heap is not None else None
        if live is not None:
            sample_["jvm_live"] = live
            with self._lock:
                self._live.append(live)

    @contextmanager
    def window(self):
        """Yields a dict filled, when the block ends, with the peak memory (bytes) by kind.
        The bench's process first gives back what it holds unused, so that the figure is
        the block's own, not what an earlier contender left (give_back)."""
        give_back()
        peaks: dict[str, int] = {}
        with self._lock:
            self._peak = sample(os.getpid())
            self._live = []
            self._live_due = time.monotonic() + self.live_every
        try:
            yield peaks
        finally:
            last = sample(os.getpid())
            self._add_live_heap(last)
            with self._lock:
                peaks.update({k: max(self._peak.get(k, 0), v) for k, v in last.items()})
                if self._live:
                    peaks["jvm_live_p90"] = percentile_90(self._live)
                self._peak = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def percentile_90(values: list[int]) -> int:
    """The 90th percentile of `values` (interpolated; one value is its own)."""
    if len(values) == 1:
        return values[0]
    return round(statistics.quantiles(values, n=10, method="inclusive")[-1])
