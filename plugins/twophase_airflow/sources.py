"""Sources in Airflow: what a DAG author names as a pipeline's input (LoadConfig(source=...)).

What a load reads is fixed at begin (twophase/sources; docs/sources.md); its prepare job
reads it with `twophase.spark.job.read_source(spark, spec)`.
- KafkaTopicSource, LandingFolder: each load reads what follows the last committed load
  of the source; such loads are exactly once per source, not per data interval. A run
  that finds nothing new ends green without a load (`empty="skip"`, the default) or loads
  an empty one (`empty="load"`: a commit per run, e.g. to show the pipeline is alive).
- IntervalFolder: each load reads the whole folder of its run's data interval; loads stay
  exactly once per data interval, as without a source. With `wait=WaitForInput(...)` a run
  first waits for its folder to land (twophase_airflow.input_wait), holding no worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

from twophase.sources.files import FilesSource
from twophase.sources.kafka import START_EARLIEST, KafkaSource
from twophase.spark.storage import storage_uri
from twophase.spec import SpecError

from .kinds.kafka import DEFAULT_CONN_ID as DEFAULT_KAFKA

EMPTY = ("skip", "load")
THEN = ("fail", "skip")


def _check_empty(source) -> None:
    if source.empty not in EMPTY:
        raise SpecError(f"{type(source).__name__} empty must be one of {', '.join(EMPTY)}, got {source.empty!r}")


@dataclass(frozen=True)
class KafkaTopicSource:
    """A Kafka topic, read from the last committed load's offsets to the partitions' last
    stable offsets.

    - conn_id: the Airflow connection of its cluster;
    - group: who reads it (its continuity, and the consumer group Kafka's tools show the
      lag of); '' = the pipeline's name;
    - start: where the first load starts, "earliest" or an ISO timestamp with a time zone;
    - cap: at most this many offsets per load (0: all there are), so a backlog drains over
      several loads;
    - empty: "skip" (no load when nothing is new) or "load" (an empty load).
    """

    topic: str
    conn_id: str = DEFAULT_KAFKA
    group: str = ""
    start: str = START_EARLIEST
    cap: int = 0
    empty: str = "skip"
    kind = "kafka"

    def __post_init__(self):
        if not isinstance(self.conn_id, str) or not self.conn_id.strip():
            raise SpecError(f"KafkaTopicSource {self.topic!r} conn_id must name an Airflow connection, "
                            f"got {self.conn_id!r}")
        _check_empty(self)
        self.core("check", "")  # the core's rules, so a wrong setting fails the DAG file's import

    per_interval = False  # loads are once per source, not per data interval

    def core(self, pipeline: str, connection: str, interval=None) -> KafkaSource:
        return KafkaSource(self.topic, group=self.group or pipeline, start=self.start, cap=self.cap,
                           connection=connection)


@dataclass(frozen=True)
class LandingFolder:
    """A folder where files land: each load reads the files no committed load read (at most
    `cap`, oldest first; 0: all), each exactly once whenever it lands. Its listing is fixed
    at begin; a file that changes or vanishes before the load read it fails the load. A
    storage URI (file://, s3a://, hdfs://) or an absolute path."""

    folder: str
    cap: int = 0
    empty: str = "skip"
    kind = "files"
    conn_id = ""  # local or Hadoop file systems: no Airflow connection

    def __post_init__(self):
        if not isinstance(self.folder, str) or not self.folder.strip():
            raise SpecError(f"LandingFolder folder must be a storage URI or an absolute path, got {self.folder!r}")
        _check_empty(self)
        self.core("check", "")

    per_interval = False

    def core(self, pipeline: str, connection: str, interval=None) -> FilesSource:
        return FilesSource(self.folder, "new", self.cap)


@dataclass(frozen=True)
class WaitForInput:
    """A run waits for its interval's folder to land before its load begins, in Airflow's
    triggerer: no worker slot is held while it waits (the wait_for_input task is deferred).

    - up_to: the longest it waits, from when the wait_for_input task first looks (a
      timedelta; 0 looks once);
    - then: what a run whose input has not landed by then does: "fail" (the run fails,
      naming the folder and what is missing) or "skip" (the run ends green without a load,
      saying why in its finish task);
    - marker: a file the folder must hold to count as landed, such as "_SUCCESS", which its
      writer makes when it has written everything; '' = the folder exists (then every file
      in it must be complete when it appears, e.g. the folder is renamed into place);
    - every: how often the triggerer looks; None = TWOPHASE_INPUT_POLL_S seconds, else 60.
    """

    up_to: timedelta
    then: str = "fail"
    marker: str = ""
    every: timedelta | None = None

    def __post_init__(self):
        if not isinstance(self.up_to, timedelta) or self.up_to < timedelta(0):
            raise SpecError(f"WaitForInput up_to must be a timedelta of 0 or more, got {self.up_to!r}")
        if self.then not in THEN:
            raise SpecError(f"WaitForInput then must be one of {', '.join(THEN)}, got {self.then!r}")
        if not isinstance(self.marker, str) or "/" in self.marker or self.marker in (".", ".."):
            raise SpecError(f"WaitForInput marker must be a file name in the folder (no '/'), got {self.marker!r}")
        if self.every is not None and (not isinstance(self.every, timedelta) or self.every <= timedelta(0)):
            raise SpecError(f"WaitForInput every must be a positive timedelta, got {self.every!r}")


@dataclass(frozen=True)
class IntervalFolder:
    """The folder of each run's data interval: `folder(interval)` gives its storage URI or
    absolute path (e.g. `.../landing/date=2026-11-20`). Every load of the interval reads
    all of its files, listed at begin (a replace load lists them again); a file that
    changes or vanishes before the load read it fails the load, and a folder that does
    not exist refuses the load at begin. Loads stay exactly once per data interval.
    An empty folder is an empty load (the vote's min_rows gate decides whether it commits).
    `wait`: a WaitForInput, to wait for the folder to land first (late input) instead of
    refusing the load at once."""

    folder: Callable
    wait: WaitForInput | None = None
    kind = "files"
    conn_id = ""
    empty = "load"
    per_interval = True

    def __post_init__(self):
        if not callable(self.folder):
            raise SpecError("IntervalFolder folder must be a function (interval) -> the interval's folder, "
                            f"got {self.folder!r}")
        if self.wait is not None and not isinstance(self.wait, WaitForInput):
            raise SpecError(f"IntervalFolder wait must be a WaitForInput(...) or None, got {self.wait!r}")

    def core(self, pipeline: str, connection: str, interval=None) -> FilesSource:
        """The core source of `interval`'s folder (SpecError naming a bad URI)."""
        return FilesSource(storage_uri(self.folder(interval), "IntervalFolder's folder"), "interval")


SOURCE_CLASSES = (KafkaTopicSource, LandingFolder, IntervalFolder)
