"""The frame of a prepare job: what runs inside spark-submit around the user's code.

A pipeline's Spark job only computes; this frame stages and votes:

    from twophase.spark.job import Output, run

    def build(spark, spec) -> Output:       # spec: the LoadSpec logged by begin
        df = ...                              # read spec.input (or read_source(spark, spec)),
                                              # validate, aggregate
        return Output(df, metrics={"input_lines": n, "rejected_lines": r}, rejects=bad)
        # rejects (optional): the rejected lines, columns reason and any of source, detail,
        # content; kept in the quarantine (twophase.quarantine), quarantine_cap per reason
        # or, when targets load different frames (a target's `frame`):
        # return Output({"": per_customer, "summary": one_row_per_day}, metrics)

    if __name__ == "__main__":
        run(build)

`run` reads `--load-id` from the command line and the servers from the connections file
`--connections-file` names (what the prepare operator ships with --files: no secret on a
command line; `connections` says where the driver finds it), or else from the environment
(Connections.from_env: TWOPHASE_PG_DSN, TWOPHASE_KAFKA_BOOTSTRAP, TWOPHASE_CONNECTIONS).
It checks that the executors' Python imports what the load's writers need
(executors.check), calls `build`, stages each frame once to every target it feeds
(coordinator.prepare) and logs the votes. If anything fails, the
error's root cause (errors.root_cause: one line, e.g. "FileNotFoundException: File
file:/... does not exist" rather than py4j's "An error occurred while calling o312...")
is written to the transaction log, so the vote and the rollback can say why, and the job
exits non-zero. It never decides: the vote task does.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..connections import Connections
from ..errors import root_cause
from ..gates import quarantine
from ..log import PostgresLog
from ..protocol import coordinator
from ..protocol.states import State
from ..server_errors import servers
from ..sources import Range
from ..spec import LoadSpec, SpecError
from . import executors

log = logging.getLogger("twophase.prepare")
_conns: list[Connections] = []  # the running job's servers, for read_source


@dataclass
class Output:
    """What a job hands to the frame: the rows to load and its own figures."""

    df: object  # a pyspark.sql.DataFrame (the main frame), or {frame name: DataFrame}
    metrics: dict = field(default_factory=dict)
    rejects: object = None  # a DataFrame of rejected lines for the quarantine (twophase.quarantine)
    quarantine_cap: int = quarantine.DEFAULT_CAP  # lines kept per reason


def run(build: Callable[[object, LoadSpec], Output], argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description="Stage one load (prepare phase of the two-phase commit).")
    parser.add_argument("--load-id", required=True, help="the load begun by the pipeline's begin task")
    parser.add_argument("--connections-file", help="the servers, as Connections.to_file wrote them (shipped with "
                        "--files); without it, from the environment (TWOPHASE_PG_DSN, ...)")
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(f"twophase prepare {args.load_id}")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        prepare(spark, build, args.load_id, connections(args.connections_file))
    finally:
        spark.stop()


def prepare(spark, build: Callable[[object, LoadSpec], Output], load_id: str, conns: Connections) -> None:
    """Stage one begun load in this Spark session: what `run` does inside spark-submit,
    for a driver that keeps its session between loads (bench/source.py). Raises when the
    prepare fails (its root cause logged first). The session gets `configure`'s settings,
    and what the job kept (persist, cache) is let go when the prepare ends: it was the
    load's."""
    configure(spark)
    _conns.append(conns)
    try:
        _prepare(spark, build, load_id, conns)
    finally:
        _conns.pop()
        spark.catalog.clearCache()


def configure(spark) -> None:
    """What the frame sets on a job's session, for what a job keeps (persist, cache):
    - adaptive execution sizes it as it sizes what it does not. Otherwise a kept aggregate
      keeps spark.sql.shuffle.partitions (200) however small, and each partition is staged
      on its own (a 1,000-record load of the streaming example: 23 s of staging, against 2 s);
    - it is kept uncompressed: keeping a million judged lines took 1.3-1.5 s compressed,
      0.6-0.9 s not, for about 60 MB (bench/findings.md); what does not fit in memory goes
      to disk (MEMORY_AND_DISK)."""
    spark.conf.set("spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "true")
    spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")


def read_source(spark, spec: LoadSpec):
    """The load's input as a DataFrame: exactly the range its source fixed at begin
    (spec.source_range), read by Spark (twophase/sources: a Kafka topic's records, a
    landing folder's lines). A source that needs the job's servers (Kafka) is read only
    inside `run`'s build; a folder's anywhere (bench/validation.py)."""
    if spec.source is None or spec.source_range is None:
        raise SpecError(f"load {spec.load_id} has no source: its pipeline names none (LoadConfig(source=...))")
    return spec.source.frame(spark, Range.from_json(spec.source_range), _conns[-1] if _conns else None)


def connections(path: str | None) -> Connections:
    """The job's servers: the connections file at `path` as given (the driver runs where
    the operator wrote it: client deploy mode), else its name in the driver's working
    directory (YARN's cluster mode puts --files there), else in SparkFiles (Spark's copy of
    --files; Kubernetes); without a file, from the environment (a job run by hand)."""
    if not path:
        return Connections.from_env()
    for candidate in (Path(path), Path.cwd() / Path(path).name):
        if candidate.is_file():
            return Connections.from_file(candidate)
    from pyspark import SparkFiles

    shipped = Path(SparkFiles.get(Path(path).name))
    if not shipped.is_file():
        raise SpecError(f"connections file {Path(path).name} not found: not at {path}, not in the driver's working "
                        f"directory, not in SparkFiles; pass it with --files")
    return Connections.from_file(shipped)


def _prepare(spark, build: Callable[[object, LoadSpec], Output], load_id: str, conns: Connections) -> None:
    txlog = PostgresLog(conns.pg_dsn)
    with servers(pg_dsn=conns.pg_dsn):  # the log's Postgres down: one line, not psycopg2's traceback
        load = txlog.get(load_id)
    log.info("load %s (state %s): input %s", load.load_id, load.state, load.input)
    if load.state == State.PREPARED:
        log.info("already prepared by an earlier attempt; nothing to do")
        return
    if load.state != State.PREPARING:
        raise SystemExit(f"load {load.load_id} is {load.state} ({load.reason}); it can no longer be prepared")
    try:
        started = time.monotonic()
        try:
            executors.check(spark, conns.participants(load.spec()))
            output = build(spark, load.spec())
        except Exception as exc:
            # The root cause while the JVM is still up (a Py4JJavaError's text comes from it).
            coordinator.record_prepare_error(txlog, load.load_id, exc)
            raise
        log.info("job metrics: %s", output.metrics)
        if output.rejects is not None:
            kept = txlog.quarantine(load.load_id, quarantine.capped(output.rejects, output.quarantine_cap))
            log.info("quarantine: kept %d rejected lines (at most %d per reason); see `python -m twophase show %s "
                     "--rejected`", kept, output.quarantine_cap, load.load_id)
        votes = coordinator.prepare(txlog, conns, load.load_id, output.df, output.metrics)  # logs its own errors
        for vote in votes.values():
            log.info("%s voted %s: %s%s", vote.participant, "yes" if vote.yes else "no", vote.summary or vote.count,
                     f" ({vote.reason})" if vote.reason else "")
        log.info("prepare finished in %.1f s; the load is PREPARED and waits for the vote",
                 time.monotonic() - started)
    except Exception as exc:
        log.error("prepare failed: %s (the whole error follows)", root_cause(exc))
        raise
