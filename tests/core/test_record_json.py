"""The Kafka staging records whose values the JVM makes itself (spark/jvm/RecordJson.java)
are what Spark's to_json makes, byte for byte, and their checksums what the Python side
computes.

The values: 3,000 seeded random rows of every type RecordJson writes, with hostile values
mixed in (every control character, quotes and backslashes, non-ASCII text and text that is
not UTF-8; every double and float bit pattern, NaN and the infinities; decimals too small
for plain notation; dates and instants of the years -300 to 10,200), a tenth of them null,
and a column whose name needs escapes. They are staged in four session time zones (UTC, a
fixed offset, and two with history: daylight saving and local mean time of seconds), with
nulls left out, kept because the session says so, and kept because the target declares
its schema. Each staging topic's records must equal Spark's to_json of the same rows.
"""

from __future__ import annotations

import logging
import math
import random
import struct
import uuid
import zlib
from decimal import Decimal

import pytest

from support import read_topic
from twophase.participants.kafka import KafkaParticipant, KafkaTarget
from twophase.spark import jvm_stage
from twophase.spark import stage as spark_stage

ROWS = 3000
ODD_NAME = 'we"ird\\name\t/é'
SCHEMA = ("customer_id string, s string, hex string, tiny tinyint, small smallint, i int, big bigint, flag boolean, "
          "f float, d double, d5 decimal(5,0), cents decimal(12,2), tiny_dec decimal(18,10), wide decimal(38,10), "
          "days int, micros bigint")
# Instants and dates at the edges of four-digit years, of 1970 and of Java's rounding.
EDGE_MICROS = [0, -1, 1, 999, -62135596800000000, -62135596800000001, -62167219200000000, 253402300799999999,
               253402300800000000, -2208988800000000, 1615712400000000]
EDGE_DAYS = [0, -1, -719162, -719163, -719528, -719529, 2932896, 2932897, -1000000, 3000000]
EDGE_TEXT = ["", '"', "\\", "/", "\x7f", "\u2028", "\x00\x01\x1f", "\b\t\n\f\r", "é ✓ 𝄞", "\ufffd"]
CHARS = [chr(c) for c in range(0x20)] + list(' "\\/az~\x7f') + ["é", "✓", "𝄞", "\u2028", "\ufeff"]
# Bytes that are not UTF-8: a lone continuation byte, an overlong form, a surrogate, a cut sequence.
SPECIAL = [math.nan, math.inf, -math.inf]
BAD_UTF8 = ["80", "c0af", "eda080", "e282", "41ff42", "f4908080"]


def _maybe(rng: random.Random, value):
    return None if rng.random() < 0.1 else value


def _real(rng: random.Random, n: int, layout: str, plain: list[float]) -> float:
    """Two rows in three: any bit pattern (of a float: "<f", a double: "<d"); else a plain or special value."""
    if n % 3:
        return struct.unpack(layout, rng.randbytes(struct.calcsize(layout)))[0]
    return rng.choice([*plain, *SPECIAL])


def _rows(seed: int) -> list[tuple]:
    rng = random.Random(seed)
    rows = []
    for n in range(ROWS):
        text = rng.choice(EDGE_TEXT) if n % 7 == 0 else "".join(rng.choice(CHARS) for _ in range(rng.randint(0, 12)))
        raw = rng.choice(BAD_UTF8) if n % 5 == 0 else "".join(rng.choice(CHARS[32:40]) for _ in range(3)).encode().hex()
        rows.append((
            f"c{n:06d}", _maybe(rng, text), _maybe(rng, raw), _maybe(rng, rng.randint(-128, 127)),
            _maybe(rng, rng.randint(-32768, 32767)), _maybe(rng, rng.randint(-2**31, 2**31 - 1)),
            _maybe(rng, rng.choice([-2**63, 2**63 - 1, rng.randint(-2**63, 2**63 - 1)])),
            _maybe(rng, rng.random() < 0.5),
            _maybe(rng, _real(rng, n, "<f", [1e10, 1e-5, 1.5, 0.0])),
            _maybe(rng, _real(rng, n, "<d", [1e7, 1e-5, -0.0, 0.1])),
            _maybe(rng, Decimal(rng.randint(-99999, 99999))),
            _maybe(rng, Decimal(rng.choice([0, 1, -5, rng.randint(-10**12 + 1, 10**12 - 1)])).scaleb(-2)),
            _maybe(rng, Decimal(rng.choice([0, 1, -1, 999, 10**4, rng.randint(-10**18 + 1, 10**18 - 1)])).scaleb(-10)),
            _maybe(rng, Decimal(rng.randint(-10**38 + 1, 10**38 - 1)).scaleb(-10)),
            _maybe(rng, rng.choice(EDGE_DAYS) if n % 4 == 0 else rng.randint(-829000, 3000000)),
            _maybe(rng, rng.choice(EDGE_MICROS) if n % 4 == 0 else rng.randint(-7 * 10**16, 2 * 10**17)),
        ))
    return rows


def _frame(spark, seed: int):
    from pyspark.sql import functions as F

    raw = spark.createDataFrame(_rows(seed), SCHEMA).repartition(2)
    columns = [F.col(c) for c in raw.columns if c not in ("hex", "days", "micros")]
    return raw.select(*columns, F.expr("cast(unhex(hex) as string)").alias("bad"),
                      F.expr("date_from_unix_date(days)").alias("day"), F.expr("timestamp_micros(micros)").alias("at"),
                      F.col("tiny").alias(ODD_NAME))


def _staged(spark, bootstrap: str, df, declared: bool, caplog) -> tuple[list, dict]:
    """Stage df's records to a fresh topic in the JVM: (records, the writer's reports)."""
    topic = f"t-record-json-{uuid.uuid4().hex[:8]}"
    schema = {f.name: f.dataType.simpleString() for f in df.schema.fields} if declared else {}
    participant = KafkaParticipant(bootstrap, KafkaTarget(topic, "customer_id", frame_schema=schema),
                                   f"record-json-{topic}")
    staging = participant.stage({"": df.columns})
    with caplog.at_level(logging.INFO, logger="twophase.spark.stage"):
        caplog.clear()
        staged = spark_stage.stage(df, {"kafka": staging})
    assert "runs in the JVM" in caplog.text, caplog.text
    assert staged.expected == {topic: ROWS}
    return read_topic(bootstrap, participant.topics[0].staging_topic), staged.reports["kafka"][topic]


@pytest.mark.parametrize("zone, nulls", [("UTC", "left out"), ("+05:30", "kept by the session"),
                                         ("America/New_York", "kept by the target's schema"),
                                         ("Asia/Kolkata", "left out")])
def test_the_jvm_makes_every_value_as_to_json_does(zone, nulls, spark, kafka_bootstrap, monkeypatch, caplog):
    from pyspark.sql import functions as F

    monkeypatch.delenv(jvm_stage.PASS_ENV, raising=False)
    df = _frame(spark, seed=len(zone))
    declared = nulls == "kept by the target's schema"
    if declared:  # a declared schema has plain names, and no tinyint or smallint
        df = df.select(*[F.col(c).cast("int").alias(c) if t in ("tinyint", "smallint") else F.col(c)
                         for c, t in df.dtypes if c != ODD_NAME])
    settings = {"spark.sql.session.timeZone": zone,
                "spark.sql.jsonGenerator.ignoreNullFields": "false" if nulls == "kept by the session" else "true"}
    before = {key: spark.conf.get(key) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        options = {"ignoreNullFields": "false"} if declared else {}
        wanted = {row.customer_id: row.json for row in
                  df.select("customer_id", F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]), options)
                            .alias("json")).collect()}
        records, reports = _staged(spark, kafka_bootstrap, df, declared, caplog)
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)
    values = {m.key().decode(): m.value() for m in records}
    assert len(records) == len(values) == ROWS
    differing = sorted(key for key in wanted if values.get(key) != wanted[key].encode())
    assert not differing, [(key, values.get(key), wanted[key].encode()) for key in differing[:3]]
    assert sum(r["checksum"] for r in reports) == sum(zlib.crc32(m.value(), zlib.crc32(m.key())) for m in records)
    # The rows hold what the test is about.
    every = "\n".join(wanted.values())
    for form in ['"NaN"', '"-Infinity"', "E-10", "\\u001F", "\\b", '\\"', "\ufffd", "+10000-", '"-0001-', ".999"]:
        assert form in every, form
    assert declared or '"we\\"ird\\\\name\\t/é":' in every
    assert ("null" in every) == (nulls != "left out")
    if zone == "America/New_York":
        assert "-04:56:02" in every and "-04:00" in every and "-05:00" in every
