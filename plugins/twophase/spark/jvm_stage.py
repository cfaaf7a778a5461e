"""The staging pass in the executors' JVM, where every writer of a frame has a JVM form.

The pass in Python (stage.py's mapInArrow) turns each row into Arrow, hands it to a
Python worker, and there one call per record produces to Kafka while pyarrow writes the
CSV for Postgres' COPY. Its JVM form (jvm/StagePass.java, StagingCopy.java,
StagingRecords.java) reads Spark's own rows where they are and writes both with the Java
clients: 1M narrow rows to Postgres and Kafka in 2.71 s instead of 5.08 s, 5M in 13.5 s
instead of 24.2 s (2 cores; bench/findings.md). It does the same work, with the same staging, reports,
checks and messages: the same transaction per partition (advisory lock, delete of an
earlier attempt's rows, COPY, commit), the same headers on every staged record, the same
refusals (StagingRefused, RecordTooLarge) and the failpoints of the crash tests.

A Kafka record's value, where its columns are of types the JVM writes, is made by
RecordJson.java, byte for byte as the Python pass's to_json makes it, with its checksum;
each writer's spec says which columns it `reads`, and Spark computes no other (ADR 0016).

It runs when all of these hold, else the pass runs in Python and the log says why:

- every writer of the frame has one (`jvm_spec`: Postgres and Kafka; Iceberg does not),
  and its columns are of types it writes (jvm_spec raises NotInJvm naming the column);
- the Java sources compile against the driver's classpath and the jars of `spark.jars`
  (Postgres' JDBC driver and the Kafka client: the stack's Spark connection names them);
- TWOPHASE_STAGING_PASS is not "python" (the switch the tests use to run both passes).
"""

from __future__ import annotations

import logging
import os
import re
import weakref
from dataclasses import dataclass
from pathlib import Path

from ..errors import root_cause
from ..jvm_build import JvmUnavailable
from ..participants.contract import NotInJvm
from .java_functions import add_jar

log = logging.getLogger("twophase.spark.stage")
SOURCES = tuple(Path(__file__).with_name("jvm") / name for name in (
    "StagePass.java", "StagingCopy.java", "StagingRecords.java", "RecordJson.java", "ColumnTypes.java",
    "CivilDate.java"))
PASS_ENV = "TWOPHASE_STAGING_PASS"
_ready: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> None (ready) or why not


@dataclass(frozen=True)
class Result:
    """One partition's report of one writer, as stage.py's mapInArrow pass returns it."""

    part: int
    attempt: str
    rows: int
    participant: str
    target: str
    report: str


def run(frame, writers: list) -> list[Result] | None:
    """Stage `frame` (its columns: the job's and those the participants asked for) to
    `writers` ((participant, target, PartitionWriter)) in the JVM; None when the pass
    must run in Python instead (logged, with why)."""
    spark = frame.sparkSession
    specs, why = _specs(frame, writers)
    if why is None:
        if spark not in _ready:
            _ready[spark] = _load(spark)
        why = _ready[spark]
    if why is not None:
        log.info("the staging pass of %s runs in Python: %s", _targets(writers), why)
        return None
    log.info("the staging pass of %s runs in the JVM", _targets(writers))
    try:
        lines = _stage_pass(spark).run(_read_only(frame, specs)._jdf, specs, _failpoint())
    except Exception as exc:
        own = _own_failure(exc)
        if own is None:
            raise
        raise own from None  # its message is the whole story; Spark's wrapping only hides it
    results = []
    for line in lines:
        part, attempt, rows, participant, target, report = line.split("\t", 5)
        results.append(Result(int(part), attempt, int(rows), participant, target, report))
    return results


def _specs(frame, writers: list) -> tuple[list[dict] | None, str | None]:
    """(every writer's JVM settings, None), or (None, why the pass runs in Python)."""
    if os.environ.get(PASS_ENV, "").strip().lower() == "python":
        return None, f"{PASS_ENV}=python"
    fields = [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]
    specs = []
    for participant, target, writer in writers:
        try:
            specs.append({**writer.jvm_spec(fields), "participant": participant, "target": target})
        except NotInJvm as exc:
            return None, f"{target}: {exc}"
    return specs, None


def _read_only(frame, specs: list[dict]):
    """`frame` with every column no spec `reads` (popped from each) replaced by a null of
    its type: ordinals stay, and Spark never computes what no writer reads (the Kafka
    values and checksums of Staging.columns, where RecordJson makes them)."""
    from pyspark.sql import functions as F

    reads = {int(ordinal) for spec in specs for ordinal in spec.pop("reads").split(",") if ordinal}
    fields = frame.schema.fields
    if len(reads) == len(fields):
        return frame
    return frame.select(*[F.col("`" + f.name.replace("`", "``") + "`") if i in reads
                          else F.lit(None).cast(f.dataType).alias(f.name) for i, f in enumerate(fields)])


def _load(spark) -> str | None:
    """Compile the sources (once per machine) and add their jar to the session; None when
    done, else why not."""
    from py4j.java_gateway import JavaClass

    try:
        jar = add_jar(spark, "spark-staging", "StagePass", list(SOURCES))
        if not isinstance(_stage_pass(spark), JavaClass):
            raise JvmUnavailable(f"the driver does not see the classes of {jar}")
    except Exception as exc:  # noqa: BLE001 - any failure leaves the pass in Python
        why = str(exc) if isinstance(exc, JvmUnavailable) else root_cause(exc)
        log.warning("the staging pass cannot run in the JVM: %s; it runs in Python", why)
        return why
    return None


_OWN = re.compile(r"twophase\.(StagingRefused|RecordTooLarge|KafkaUnreachable):((?: [0-9a-f]*)*)")


def _own_failure(exc: Exception) -> Exception | None:
    """The twophase exception a JVM writer failed with (StagePass.failure: its name and
    fields), its message written by the Python writer's own function; or None."""
    from ..errors import KafkaUnreachable, one_line
    from ..participants.kafka.writer import RecordTooLarge, too_large
    from ..participants.postgres.writer import StagingRefused, refusal

    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - the JVM may be gone
        return None
    found = _OWN.search(text)
    if found is None:
        return None
    fields = [bytes.fromhex(field) for field in found.group(2).split(" ")[1:]]
    name, strings = found.group(1), [field.decode("utf-8", "replace") for field in fields]
    if name == "StagingRefused":
        primary, context, part, staging, target = strings
        return StagingRefused(refusal(primary, context, int(part), staging, target))
    if name == "RecordTooLarge":
        size, has_key, _, limit, framing, limited_by = strings
        return RecordTooLarge(too_large(int(size), fields[2] if has_key else None, int(limit), int(framing),
                                        limited_by))
    [message] = strings
    return KafkaUnreachable(one_line(message))


def _stage_pass(spark):
    """The class StagePass, through the session's class loader of added jars. ADD JAR makes
    that loader the context class loader of the one JVM thread that ran it, and Py4J finds
    classes through the calling thread's: a load staged from another Python thread (pinned
    to another JVM thread) would find none."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.Thread.currentThread().setContextClassLoader(spark._jsparkSession.sharedState().jarClassLoader())
    return jvm.twophase.StagePass


def _failpoint() -> dict[str, str]:
    """The driver's failpoint settings (twophase/failpoints.py) for the JVM's own points."""
    point = os.environ.get("TWOPHASE_FAILPOINT", "")
    if not point.startswith("spark."):
        return {}
    settings = {"point": point, "once": os.environ.get("TWOPHASE_FAILPOINT_ONCE"),
                "wait": os.environ.get("TWOPHASE_FAILPOINT_WAIT")}
    return {k: v for k, v in settings.items() if v}


def _targets(writers: list) -> str:
    return ", ".join(target for _, target, _ in writers)
