"""A failed prepare says why, everywhere the reason is shown.

Real failures inside Spark (a Python worker staging a record the topic refuses, a value
Postgres' COPY refuses) and in the JVM (an input file that vanished between listing and
reading) reach the driver wrapped in py4j's and pyspark's exceptions. Each test asserts
that the root cause is in the load's prepare_error, in the vote's ABORT reason and in
`python -m twophase show`, and that nothing became visible in the table or the topic.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from support import make_df, make_spec, read_topic, table_of, topic_of
from twophase.protocol import coordinator
from twophase.protocol.states import State
from support import count_table_rows
from twophase.ops.verify import verify


def _show(load_id: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "twophase", "show", load_id, "--json"], capture_output=True,
                          text=True, timeout=120, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _fails_with(spark, txlog, conns, target, df, cause: str) -> None:
    """Prepare fails; `cause` (a regex) is the recorded reason, the vote's, show's; the
    rollback leaves nothing visible."""
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    with pytest.raises(Exception):
        coordinator.prepare(txlog, conns, spec.load_id, df)

    load = txlog.get(spec.load_id)
    assert load.state == State.PREPARING
    assert re.match(cause, load.prepare_error), load.prepare_error
    assert "\n" not in load.prepare_error and len(load.prepare_error) <= 400
    for wrapper in ("An exception was thrown from the Python worker", "An error occurred while calling"):
        assert wrapper not in load.prepare_error

    decided = coordinator.vote(txlog, conns, spec.load_id)
    assert decided.state == State.ABORTING
    assert decided.reason == f"prepare failed: {load.prepare_error}"

    shown = _show(spec.load_id)
    assert shown["prepare_error"] == load.prepare_error
    assert shown["reason"] == decided.reason
    assert [h["reason"] for h in shown["history"] if h["to"] == "ABORTING"] == [decided.reason]

    coordinator.rollback(txlog, conns, spec.load_id)
    load = txlog.get(spec.load_id)
    assert load.state == State.ABORTED
    assert count_table_rows(conns.pg_dsn, table_of(spec).table, spec.load_id) == 0
    assert read_topic(conns.kafka_bootstrap, topic_of(spec).topic, "read_uncommitted") == [], \
        "the target topic is never written before a commit"
    [finding] = verify(txlog, conns, [load])
    assert finding.ok, finding


def test_record_over_the_topics_max_message_bytes(spark, txlog, conns, target):
    from pyspark.sql import functions as F

    df = make_df(spark, 20, partitions=2).withColumn(
        "note", F.when(F.col("customer_id") == "c000003", F.repeat(F.lit("x"), 2 * 1024 * 1024)).otherwise(F.col("note")))
    _fails_with(spark, txlog, conns, target, df,
                r"RecordTooLarge: record of 2,097,\d{3} bytes \(key and value\) for key 'c000003' exceeds the "
                r"max\.message\.bytes 1,048,588 of topic " + re.escape(target["topic"]) + r"(\.twophase-staging)? "
                r"\(headers and framing take \d+ of it\): make the record smaller in the job, or raise "
                r"max\.message\.bytes")


def test_nul_character_in_a_text_column(spark, txlog, conns, target):
    from pyspark.sql import functions as F

    df = make_df(spark, 20, partitions=2).withColumn(
        "note", F.when(F.col("customer_id") == "c000004", F.lit("before\u0000after")).otherwise(F.col("note")))
    _fails_with(spark, txlog, conns, target, df,
                r"StagingRefused: Postgres refused row \d+ of Spark partition \d+ while staging into "
                r"twophase_staging\.stg_\w+ for " + re.escape(target["table"]) + r": a text value holds a NUL "
                r"character \(U\+0000\), which Postgres cannot store in text: remove it in the job")


def test_input_file_vanishes_between_listing_and_reading(spark, txlog, conns, target, tmp_path):
    from pyspark.sql import functions as F

    files = []
    for name, first in (("part-0.jsonl", 0), ("part-1.jsonl", 50)):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"customer_id": f"c{i:06d}"}) + "\n" for i in range(first, first + 50)))
        files.append(str(path))
    lines = spark.read.text(files)  # lists the files now
    df = (lines.select(F.get_json_object("value", "$.customer_id").alias("customer_id")).groupBy("customer_id").count()
          .select("customer_id", F.lit("2026-11-20").cast("date").alias("day"), F.col("count").cast("int").alias("orders"),
                  F.lit(None).cast("decimal(12,2)").alias("revenue"), F.lit(None).cast("string").alias("note")))
    os.unlink(files[1])  # ... and reads them only when staging runs
    _fails_with(spark, txlog, conns, target, df,
                r"FileNotFoundException: File file:" + re.escape(files[1]) + " does not exist$")


def test_record_above_librdkafkas_default_limit_but_within_the_topics_commits(spark, txlog, conns, target):
    """librdkafka refuses records above its own message.max.bytes (1,000,000 by default)
    although the broker takes up to the topic's max.message.bytes (1,048,588): staging and
    the commit copy allow what the topics allow."""
    from pyspark.sql import functions as F

    df = make_df(spark, 10, partitions=2).withColumn(
        "note", F.when(F.col("customer_id") == "c000003", F.repeat(F.lit("y"), 1_040_000)).otherwise(F.col("note")))
    spec = make_spec(target)
    coordinator.begin(txlog, spec)
    votes = coordinator.prepare(txlog, conns, spec.load_id, df)
    assert votes["kafka"].committable["max_message_bytes"] == 1_048_588
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, spec.load_id)
    records = read_topic(conns.kafka_bootstrap, topic_of(spec).topic)
    big = [m for m in records if m.key() == b"c000003"]
    assert len(records) == 10 and len(big) == 1 and len(big[0].value()) > 1_040_000
    assert count_table_rows(conns.pg_dsn, table_of(spec).table, spec.load_id) == 10
