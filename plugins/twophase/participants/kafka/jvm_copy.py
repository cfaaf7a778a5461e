"""The commit copy in a JVM (jvm/StagedCopy.java): the Java client copies a record in a
fraction of what one Python call per record costs (5M narrow records: 7 s against 15 s).

It runs where TWOPHASE_KAFKA_COPY_CLASSPATH names the Kafka client's jars (kafka-clients
and what it loads: lz4-java, snappy-java, zstd-jni, slf4j-api; `scripts/stack env` sets
it) and a JDK is on the PATH (or under JAVA_HOME), for copies of at least
TWOPHASE_KAFKA_JVM_COPY_MIN_RECORDS records (default MIN_RECORDS: below, the JVM's start
costs more than it saves). Elsewhere the copy runs in Python (copy.py), with the same outcome.

Python keeps every decision, as with the copy in this process: the checks before the copy
and after it, abort or commit, the failpoints. The JVM only moves records, and it commits
only when told; it halts when its standard input ends (this process died), so a crash
leaves an open transaction that the next attempt's init fences and aborts, as it does for
the Python copy.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException

from ... import failpoints
from ...errors import one_line
from ...jvm_build import JvmUnavailable, built, java_tool
from .client import java_producer_settings, request_timeout_s
from .copy import CopyJob, _CopyTimedOut, _Progress, _StagedFilter
from .writer import public_headers

_log = logging.getLogger("twophase.kafka.copy")
CLASSPATH_ENV = "TWOPHASE_KAFKA_COPY_CLASSPATH"
MIN_RECORDS_ENV = "TWOPHASE_KAFKA_JVM_COPY_MIN_RECORDS"
JAVA_OPTIONS_ENV = "TWOPHASE_KAFKA_COPY_JAVA_OPTIONS"
# Below this many records the copy in Python ends first: the JVM's start and its JIT's
# warm-up cost it about 1.5 s (400,000 records: 2.0-2.4 s against Python's 1.3-1.4 s; 1M:
# 2.7-3.1 s against 3.5 s).
MIN_RECORDS = 700_000
SOURCE = Path(__file__).with_name("jvm") / "StagedCopy.java"
JAR, ARCHIVE = "StagedCopy.jar", "StagedCopy.jsa"
START_S = 30  # at most, for a JVM to start (it takes about half a second)
QUIT_S = 10  # at most, for a JVM told to quit to end (StagedCopy.QUIT_MS)
# A small heap is plenty: the producer's buffer is capped at 64 MiB and a poll at 10,000 records.
# The JIT's full tiers: C1 alone (quicker to start) copied 5M records in 12.8 s instead of 5.3 s.
_JAVA_OPTIONS = "-Xms64m -Xmx512m -XX:+UseParallelGC"


def command(records: int) -> list[str] | None:
    """The command that starts a copy of this many records in a JVM; None: copy in Python."""
    raw = os.environ.get(MIN_RECORDS_ENV, str(MIN_RECORDS))
    try:
        least = int(raw)
    except ValueError:
        raise ValueError(f"{MIN_RECORDS_ENV}={raw!r}: a whole number of records") from None
    classpath = os.environ.get(CLASSPATH_ENV)
    if not classpath or records < least:
        return None
    options = os.environ.get(JAVA_OPTIONS_ENV, _JAVA_OPTIONS).split()
    folder = compiled(classpath)
    if (folder / ARCHIVE).exists():
        options.append(f"-XX:SharedArchiveFile={folder / ARCHIVE}")
    return [java_tool("java"), *options, "-cp", f"{folder / JAR}{os.pathsep}{classpath}", "StagedCopy"]


def compiled(classpath: str) -> Path:
    """The folder of StagedCopy.jar (jvm_build.built: once per source and classpath) and of
    its class archive (ARCHIVE): the Kafka clients' classes, which the JVM then maps
    instead of loading (ready for the copy in about 0.5 s instead of 0.7 s). Without the
    archive (a JDK that cannot make one), the JVM loads them."""
    try:
        return built("kafka-copy", "StagedCopy", [SOURCE], classpath, then=lambda folder: _archive(folder, classpath))
    except JvmUnavailable as exc:
        raise JvmUnavailable(f"{exc} (is {CLASSPATH_ENV} the Kafka client's jars?)") from None


def _archive(folder: Path, classpath: str) -> None:
    """The class archive, written aside and renamed: a copy starting meanwhile sees none or
    the whole of it."""
    writing = folder / f"{ARCHIVE}.writing"
    archived = subprocess.run([java_tool("java"), f"-XX:ArchiveClassesAtExit={writing}", "-cp",
                               f"{folder / JAR}{os.pathsep}{classpath}", "StagedCopy", "--warm"],
                              capture_output=True, text=True)
    if archived.returncode == 0 and writing.exists():
        writing.rename(folder / ARCHIVE)
    else:
        writing.unlink(missing_ok=True)
        _log.debug("no class archive for the JVM copy: %s", one_line(archived.stderr, 300))


def _reap(process: subprocess.Popen) -> None:
    """Wait for the JVM to end; kill it if it is still there after QUIT_S (and a second)."""
    try:
        process.wait(QUIT_S + 1)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _hex(text: str) -> str:
    return text.encode().hex()


class JvmCopy:
    """One commit copy's JVM, driven over its standard input and output (a context
    manager). Its methods are the copy transaction's steps, as copy.PythonCopy's."""

    def __init__(self, job: CopyJob, argv: list[str], bootstrap: str, copy_id: str, transaction_timeout_ms: int,
                 max_message_bytes: int | None):
        """`argv`: command()'s. The JVM starts on entry, and makes ready at once (start()
        waits for it): its start overlaps this process's own steps."""
        timeout_ms = int(request_timeout_s() * 1000)
        self.producer = {**java_producer_settings(bootstrap, max_message_bytes), "client.id": f"{copy_id}-producer",
                         "transactional.id": copy_id, "transaction.timeout.ms": transaction_timeout_ms}
        self.consumer = {
            "bootstrap.servers": bootstrap, "client.id": f"{copy_id}-consumer", "group.id": copy_id,
            "enable.auto.commit": "false", "isolation.level": "read_committed", "auto.offset.reset": "none",
            "max.poll.records": 10_000, "max.partition.fetch.bytes": 8 << 20, "request.timeout.ms": timeout_ms,
            "default.api.timeout.ms": 2 * timeout_ms}
        self.job, self.argv = job, argv
        self.ready = False
        self.process = None
        self.events: queue.Queue[str | None] = queue.Queue()
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)

    # -- the process ----------------------------------------------------------------------
    def __enter__(self) -> JvmCopy:
        try:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, bufsize=1)
        except OSError as exc:
            raise JvmUnavailable(f"{self.argv[0]} does not start: {exc}") from None
        threading.Thread(target=self._pump, args=(self.process.stdout, self.events.put), daemon=True).start()
        self.errors = threading.Thread(target=self._pump, args=(self.process.stderr, self._stderr), daemon=True)
        self.errors.start()
        try:
            self._send(*self._job())
        except JvmUnavailable:
            pass  # it ended at once: start() says why
        return self

    def __exit__(self, *exc) -> None:
        """Tell the JVM to quit, and return: its exit (about 50 ms) is waited out by a
        thread. A JVM stuck in a call (this process gave up on it) halts itself 10 s after
        its input ends, whether or not this process still runs."""
        try:
            self._send("quit")
            self.process.stdin.close()
        except (OSError, JvmUnavailable, KafkaException):
            pass  # it ended already
        threading.Thread(target=_reap, args=(self.process,), name="jvm-copy-reaper", daemon=True).start()

    @staticmethod
    def _pump(stream, put) -> None:
        for line in stream:
            put(line.rstrip("\n"))
        put(None)

    def _stderr(self, line: str | None) -> None:
        if line and not line.startswith("SLF4J"):
            self.stderr.append(line)
            _log.debug("JVM copy: %s", line)

    def _send(self, *lines: str) -> None:
        try:
            self.process.stdin.write("".join(line + "\n" for line in lines))
            self.process.stdin.flush()
        except OSError:
            raise self._ended() from None

    def _ended(self) -> Exception:
        """What to raise once the JVM ended unasked: JvmUnavailable before it was ready."""
        code = self.process.wait()
        self.errors.join(5)  # what it said before it ended
        said = one_line(f"the JVM commit copy ended (exit code {code}) unasked: "
                        f"{' | '.join(self.stderr) or 'nothing said'}", 600)
        return JvmUnavailable(said) if not self.ready else KafkaException(KafkaError(KafkaError._FAIL, said))

    def _next(self, timeout_s: float) -> list[str] | None:
        """The JVM's next event (its fields), None when none came within timeout_s; an
        error event or the JVM's end raise KafkaException."""
        try:
            line = self.events.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if line is None:
            raise self._ended()
        fields = line.split("\t")
        if fields[0] == "error":
            code, fatal, retriable, message = int(fields[1]), fields[2] == "1", fields[3] == "1", fields[4]
            raise KafkaException(KafkaError(code, bytes.fromhex(message).decode(), fatal=fatal, retriable=retriable))
        return fields

    def _await(self, event: str, timeout_s: float) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            fields = self._next(max(0.0, deadline - time.monotonic()))
            if fields is None:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"the JVM commit copy did not say {event} "
                                                                       f"within {timeout_s:.0f} s"))
            if fields[0] == event:
                return fields

    # -- the copy transaction's steps -----------------------------------------------------
    def _job(self) -> list[str]:
        """The job's lines (jvm/StagedCopy.java reads them)."""
        job, by_staging = self.job, {t.staging_topic: t for t in self.job.topics}
        lines = [f"producer\t{k}\t{v}" for k, v in self.producer.items()]
        lines += [f"consumer\t{k}\t{v}" for k, v in self.consumer.items()]
        lines += [f"load\t{_hex(job.load_id)}", f"expected\t{job.expected}"]
        for c in job.copies:
            ranges = {int(p): r for p, r in c["ranges"].items()}
            dense = _StagedFilter(job.load_id, c["attempts"], ranges, c["records"]).dense
            lines.append(f"topic\t{c['staging_topic']}\t{c['topic']}\t{int(dense)}")
            lines += [f"header\t{c['staging_topic']}\t{_hex(name)}\t{value.hex()}"
                      for name, value in public_headers(job.load_id, by_staging[c["staging_topic"]].headers)]
            lines += [f"range\t{c['staging_topic']}\t{p}\t{first}\t{last}" for p, (first, last) in ranges.items()]
            lines += [f"winner\t{c['staging_topic']}\t{_hex(part)}\t{_hex(attempt)}"
                      for part, attempt in c["attempts"].items()]
        return [*lines, "end"]

    def start(self, timeout_s: float) -> None:
        """Wait for the JVM to be ready: it fenced and aborted an earlier attempt's open
        transaction (its client's `timeout_s`, plus the JVM's own start)."""
        self._await("ready", timeout_s + START_S)
        self.ready = True

    def copy(self, progress: _Progress, deadline: float) -> dict[str, tuple[int, int]]:
        """Copy every staged range inside a new transaction; {staging topic: (records, checksum)}."""
        self._send(f"copy\t{max(0, int((deadline - time.monotonic()) * 1000))}")
        copied, pending = 0, [(c["staging_topic"], int(p)) for c in self.job.copies for p in c["ranges"]]
        while True:
            # The JVM reports each second; silence past the deadline means it is stuck.
            fields = self._next(1.0)
            if fields is None:
                if time.monotonic() > deadline + 2 * request_timeout_s():
                    raise _CopyTimedOut(f"copied {copied} records before the deadline; the JVM stopped answering")
            elif fields[0] == "progress":
                copied = int(fields[1])
                pending = [(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in fields[2].split(",") if tp]
            elif fields[0] == "half":
                failpoints.hit("kafka.copy_middle")
            elif fields[0] == "timed_out":
                raise _CopyTimedOut(f"copied {fields[1]} records before the deadline" if fields[2] == "0"
                                    else f"copied all {fields[1]} records, but only after the deadline")
            elif fields[0] == "copied":
                rest = fields[1:]
                return {rest[i]: (int(rest[i + 1]), int(rest[i + 2])) for i in range(0, len(rest), 3)}
            progress.tick(copied, pending)

    def abort(self, timeout_s: float) -> None:
        self._send("abort")
        self._await("aborted", timeout_s)

    def commit(self, offsets: list[tuple[str, list]], timeout_s: float) -> None:
        """Put each group's offsets (group id, TopicPartitions) in the transaction, commit it."""
        self._send("commit", *(f"offset\t{_hex(group)}\t{tp.topic}\t{tp.partition}\t{tp.offset}"
                               for group, tps in offsets for tp in tps), "offsets_end")
        self._await("committed", timeout_s)
