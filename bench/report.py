"""The Markdown report of one run: machine, targets summary, then per shape and size the
contenders' times, the atomic load's ratios to each peer and limit, commit per
participant, the Iceberg participant's staging beside pyarrow alone and its commit, and
peak memory."""

from __future__ import annotations

from pathlib import Path

from . import memory
from . import results as R
from .atomic import PHASES
from .iceberg import PHASES as ICEBERG_PHASES
from .staging import VARIANTS
from .results import Run
from .targets import MEMORY_KINDS, Check

LABELS = {
    R.SCAN: "scan of the input (noop writer; floor under every Spark contender)",
    R.JDBC_DEFAULT: "peer: Spark JDBC writer, default options",
    R.JDBC_TUNED: "peer: Spark JDBC writer, reWriteBatchedInserts=true, batchsize 10000",
    R.KAFKA_WRITER: "peer: Spark Kafka writer (spark-sql-kafka), defaults",
    R.BOTH_DEFAULT: "peer writing both: JDBC default + Kafka writer",
    R.BOTH_TUNED: "peer writing both: JDBC tuned + Kafka writer",
    R.COPY: "limit: COPY FROM STDIN of the CSV file (client-streamed)",
    R.PRODUCER_TOOL: "limit: Kafka ProducerPerformance (its own records/s)",
    R.atomic("begin"): "atomic: begin",
    R.atomic("prepare"): "atomic: prepare",
    R.atomic("prepare.setup"): "  ├ setup: staging table, topics",
    R.atomic("prepare.staging"): "  ├ staging: one Spark pass to both targets",
    R.atomic("prepare.pg_promote"): "  ├ Postgres: count the staged rows (the vote promotes them)",
    R.atomic("prepare.kafka_check"): "  └ Kafka: check staged ranges",
    R.atomic("vote"): "atomic: vote",
    R.atomic("commit"): "atomic: commit",
    R.atomic("commit.kafka"): "  ├ Kafka: transactional copy to the topic",
    R.atomic("commit.kafka_copy"): "  │  └ the copy alone: first record to commit (no JVM start, no checks)",
    R.atomic("commit.postgres"): "  └ Postgres: COMMIT PREPARED",
    R.atomic("load"): "**atomic load: prepare + vote + commit**",
    R.atomic("total"): "atomic: total, begin included",
    R.attach("prepare"): "atomic, publish attach (table partitioned by day): prepare",
    R.attach("prepare.pg_promote"): "  └ Postgres: build the primary key on staging",
    R.attach("vote"): "atomic, publish attach: vote (ATTACH PARTITION + PREPARE)",
    R.attach("commit"): "atomic, publish attach: commit",
    R.attach("load"): "**atomic load, publish attach: prepare + vote + commit**",
    R.breakdown("python_pass"): "staging breakdown: the same pass in Python (TWOPHASE_STAGING_PASS=python)",
    R.breakdown("postgres_only"): "staging breakdown: COPY alone, no Kafka",
    R.breakdown("kafka_only"): "staging breakdown: produce to Kafka alone, no Postgres",
    R.iceberg("setup"): "Iceberg: participant's stage() (create the table)",
    R.iceberg("pyarrow_alone"): "Iceberg: pyarrow alone, the same Parquet files (one per partition)",
    R.iceberg("staging"): "Iceberg: staging pass (IcebergWriter)",
    R.iceberg("prepare"): "Iceberg: prepare (check the files, vote)",
    R.iceberg("commit"): "Iceberg: commit (one catalog commit adding the files)",
}
SHORT = {R.JDBC_DEFAULT: "JDBC default", R.JDBC_TUNED: "JDBC tuned", R.KAFKA_WRITER: "Kafka writer",
         R.BOTH_DEFAULT: "both, default", R.BOTH_TUNED: "both, tuned", R.COPY: "COPY limit",
         R.PRODUCER_TOOL: "producer tool"}
ATTACH_PHASES = ("prepare", "prepare.pg_promote", "vote", "commit", "load")
ORDER = [R.SCAN, *R.PEERS, *R.LIMITS, *[R.atomic(p) for p in PHASES], *[R.attach(p) for p in ATTACH_PHASES],
         *[R.breakdown(v) for v in VARIANTS],
         *[R.iceberg(p) for p in ICEBERG_PHASES]]
RATIO_ROWS = [("staging pass", R.atomic("prepare.staging")), ("prepare", R.atomic("prepare")),
              ("Kafka commit copy", R.atomic("commit.kafka")), ("atomic load", R.atomic("load")),
              ("atomic load, publish attach", R.attach("load")),
              ("breakdown: Postgres side alone", R.breakdown("postgres_only")),
              ("breakdown: Kafka side alone", R.breakdown("kafka_only"))]
MB = 2**20


def _s(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds:.2f} s"


def _rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f}" if seconds > 0 else "–"


def render(meta: dict, runs: list[Run], checks: list[Check]) -> str:
    out = [f"# Benchmark: atomic loads beside Spark's writers and the machine's limits ({meta['started']})", ""]
    out += [f"Command: `{meta['command']}` — {meta['reps']} repetition(s) per contender, medians with min and max; "
            f"{meta['partitions']} Spark partitions; finished in {meta['elapsed_min']:.1f} min.", ""]
    out += ["## Machine", ""]
    out += [f"- **{k}**: {v}" for k, v in meta["machine"].items()]
    out += [f"- **load average** (1, 5, 15 min) at start: {meta['load_start']}; at end: {meta['load_end']}", ""]
    if meta.get("note"):
        out += [meta["note"], ""]
    out += _summary(checks, runs)
    out += _findings()
    out += _how()
    for shape in dict.fromkeys(r.shape for r in runs):
        shape_runs = sorted((r for r in runs if r.shape == shape), key=lambda r: r.rows)
        out += [f"## Shape `{shape}`", ""]
        out += _across_sizes(shape_runs)
        out += _iceberg(shape_runs)
        for run in shape_runs:
            out += _size(run)
    return "\n".join(out) + "\n"


def _summary(checks: list[Check], runs: list[Run]) -> list[str]:
    sizes = sorted({r.rows for r in runs})
    out = ["## Targets", "",
           "| target | shape | " + " | ".join(f"{n:,} rows" for n in sizes) + " | verdict |",
           "|---|---|" + "---:|" * len(sizes) + "---|"]
    for c in checks:
        cells = " | ".join(c.cells.get(n, "") for n in sizes)
        verdict = c.verdict + (f" ({c.note})" if c.note else "")
        out.append(f"| {c.target} | {c.shape} | {cells} | **{verdict}** |")
    return out + ["", "✗ marks a size where the target is missed. Ratios of times: below 1 is faster than "
                  "the peer. Shares of a limit: the atomic phase's rows/s as a share of the limit's.", ""]


def _findings() -> list[str]:
    """bench/findings.md, read at each render: what the speed work bought, measured one
    change at a time, and where the time of a load still goes."""
    path = Path(__file__).with_name("findings.md")
    return [path.read_text().strip(), ""] if path.exists() else []


def _how() -> list[str]:
    return ["## How each figure is measured", "",
            "- Every contender writes the same rows: generated with `spark.range`, persisted on local disk "
            "(DISK_ONLY) and counted before any clock starts; each repetition writes into a fresh table "
            "(primary key on day, customer_id) or topic (3 partitions), dropped afterwards.",
            "- Peers: `df.write.jdbc` (default options; tuned: `reWriteBatchedInserts=true`, `batchsize` 10000) "
            "and `df.write.format(\"kafka\")` with key and value made as the atomic load makes them. "
            "\"Peer writing both\" sums the JDBC write and the Kafka write of the same repetition.",
            "- Atomic: `twophase.protocol.coordinator` begin, prepare, vote, commit; prepare's parts are the core's own "
            "calls timed in place; commit per participant is the core's `Outcome.seconds`.",
            "- Limits: COPY of a CSV file of the same rows (written once) into the same kind of table, streamed "
            "by the client (`COPY ... FROM STDIN`: the bench's role cannot read server files); Kafka's "
            "`ProducerPerformance` with the same record count and mean key + value size, acks=all, its own "
            "records/s (JVM start-up excluded).",
            "- Staging breakdown (bench/staging.py): the staging pass three more times, each into fresh targets: "
            "Postgres' writer alone and Kafka's alone, as stage() runs them (in the executors' JVM, ADR 0015); "
            "and both in the Python pass (`TWOPHASE_STAGING_PASS=python`: mapInArrow, pyarrow's CSV, one "
            "librdkafka call per record), the JVM pass's baseline. The real pass does both sides in the same task.",
            "- Iceberg (bench/iceberg.py): into a fresh unpartitioned table of the stack's catalog (namespace "
            "`bench`), the participant's stage() (creates the table), then the same Spark pass twice: pyarrow "
            "alone (a bench writer: one `ParquetWriter` file per partition in a local folder, the table's Arrow "
            "schema and load_id column, nothing else) and the participant's IcebergWriter; then its prepare() and "
            "commit(vote). The ratio compares the two passes; rows are checked after the clocks (the files' "
            "footers, a pyiceberg scan by load id). Each table is purged and its folder deleted.",
            "- Memory: peak, polled every 0.2 s, while each Spark contender ran, the largest over the repetitions: "
            "RSS of the Spark driver JVM, of the Python workers (summed), of the bench's own Python process (the "
            "coordinator), of the Kafka commit copy's JVM and of the Kafka broker; PSS of the Postgres servers' "
            "processes, summed (bench/memory.py). With --live-heap, also the driver JVM's heap in use right after "
            f"a full collection it is asked for every {memory.LIVE_EVERY_S:g} s and at the end of each contender "
            "(a reading only where the collection ran): what it holds live, where its RSS also counts the garbage "
            "and the heap G1 grows as a run goes on. Its target compares the 90th percentile of a contender's "
            "readings (the peak beside it): a long run has more readings than a short one, and the highest of "
            "many lands higher in the same band.", ""]


def _across_sizes(runs: list[Run]) -> list[str]:
    out = ["### Across sizes", "",
           "| rows | atomic load rows/s | staging rows/s | Kafka commit s | Kafka commit records/s "
           "| Postgres commit ms (median, max) | JVM peak MB | Python workers peak MB |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        kafka, pg = R.atomic("commit.kafka"), R.atomic("commit.postgres")
        out.append(f"| {r.rows:,} | {r.rate(R.atomic('load')):,.0f} | {r.rate(R.atomic('prepare.staging')):,.0f} "
                   f"| {r.median(kafka):.2f} | {r.rate(kafka):,.0f} "
                   f"| {r.median(pg) * 1000:.1f}, {r.max(pg) * 1000:.1f} "
                   f"| {r.peak_rss('atomic', 'jvm') / MB:,.0f} | {r.peak_rss('atomic', 'workers') / MB:,.0f} |")
    return out + [""]


def _iceberg(runs: list[Run]) -> list[str]:
    """Issue 15's figures: the Iceberg staging pass beside pyarrow writing the same files alone, and the commit."""
    keys = [R.iceberg(p) for p in ICEBERG_PHASES]
    runs = [r for r in runs if all(r.has(k) for k in keys)]
    if not runs:
        return []
    alone, staging, prepare, commit = (R.iceberg(p) for p in ("pyarrow_alone", "staging", "prepare", "commit"))
    out = ["### Iceberg: staging beside pyarrow alone, and the commit", "",
           "| rows | pyarrow alone | rows/s | Iceberg staging pass | rows/s | staging ÷ pyarrow alone "
           "| + setup and prepare ÷ pyarrow alone | commit (median, max) |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        whole = r.median(R.iceberg("setup")) + r.median(staging) + r.median(prepare)
        out.append(f"| {r.rows:,} | {_s(r.median(alone))} | {r.rate(alone):,.0f} | {_s(r.median(staging))} "
                   f"| {r.rate(staging):,.0f} | {r.median(staging) / r.median(alone):.2f} "
                   f"| {whole / r.median(alone):.2f} | {_s(r.median(commit))}, {_s(r.max(commit))} |")
    return out + ["", "Medians of the same run. Both passes write the same rows as the same Parquet files "
                  "(the table's schema, one file per Spark partition), pyarrow alone first: their difference is "
                  "what the participant's writer adds. Setup is the participant's stage() (the table created), "
                  "prepare checks the staged files and votes, commit adds them in one catalog commit. At small sizes "
                  "a Spark job's fixed cost (about a second here) dominates both passes.", ""]


def _size(run: Run) -> list[str]:
    out = [f"### `{run.shape}`, {run.rows:,} rows", "",
           f"Mean Kafka record (key + value): {run.avg_record_bytes} bytes.", "",
           "| contender | median | min | max | rows/s (median) |", "|---|---:|---:|---:|---:|"]
    for key in ORDER:
        if run.has(key):
            out.append(f"| {LABELS[key]} | {_s(run.median(key))} | {_s(run.min(key))} | {_s(run.max(key))} "
                       f"| {_rate(run.rows, run.median(key))} |")
    out += _where_staging_goes(run)
    tool = [r.get("producer_tool") for r in run.reps if r.get("producer_tool")]
    if tool:
        out += ["", f"Producer tool: {tool[-1]['mb_per_s']:.1f} MB/s; wall time with JVM start-up "
                f"{tool[-1]['wall_s']:.1f} s (last repetition)."]
    refs = [*R.PEERS, *R.LIMITS]
    out += ["", "Atomic phases' rows/s as a multiple of each reference's rows/s (above 1: faster):", "",
            "| atomic phase | " + " | ".join(SHORT[k] for k in refs) + " |",
            "|---|" + "---:|" * len(refs)]
    for label, key in [(label, key) for label, key in RATIO_ROWS if run.has(key)]:
        cells = [f"{run.median(ref) / run.median(key):.2f}" if run.has(ref) else "–" for ref in refs]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += ["", "| peak memory, MB | " + " | ".join(label for _, label in MEMORY_KINDS) + " |",
            "|---|" + "---:|" * len(MEMORY_KINDS)]
    for group in R.RSS_GROUPS:
        name = "atomic load" if group == "atomic" else LABELS[group].split(" (")[0]
        out.append(f"| {name} | " + " | ".join(f"{run.peak_rss(group, kind) / MB:,.0f}" for kind, _ in MEMORY_KINDS)
                   + " |")
    return out + [""]


def _where_staging_goes(run: Run) -> list[str]:
    keys = [R.atomic("prepare.staging"), *(R.breakdown(v) for v in VARIANTS)]
    if not all(run.has(k) for k in keys):
        return []
    staging, python, pg, kafka = (run.median(k) for k in keys)
    return ["", f"Where the staging pass goes (medians): {_s(staging)} in the executors' JVM, both targets; "
            f"the Postgres side alone {_s(pg)}, the Kafka side alone {_s(kafka)}; the same pass in Python "
            f"{_s(python)} (the JVM's takes {staging / python:.0%} of its time). (Separate passes: read them "
            "where they take seconds; at small sizes fixed costs and noise dominate.)"]
