"""The schema readers' fast path (LineFields.java: csv_fields, json_fields) reads a line
as Spark's own parser does, or leaves it to Spark: on hostile lines (quotes, escapes,
control characters, bytes that are not UTF-8, numbers Spark rewrites) and on random edits
of plain lines, every line it answers has the fields from_csv / from_json give it, and it
answers every plain line (else it would prove nothing about speed). test_readers.py holds
the readers' verdicts to the same with and without it."""

from __future__ import annotations

import json
import random

import pytest

from random_edits import edited
from twophase.spark import readers

NAMES = ["ts", "url", "n"]
CSV_PLAIN = ["2026-11-20T05:00:00Z,/a,3", "x,y,z", "a,,c", ",,", "  a , b ,c ", "caf\u00e9,\u00fc\u00f1,\U0001f600",
             "a\tb,c,d"]
CSV_HOSTILE = [
    "", " ", "a", "a,b", "a,b,", "a,b,c,", "a,b,c,,", "a,b,c,,x", "a,b,c,d,e", ",,,", '"a,b",c,d', '"a"b,c,d',
    'a,"b', 'a,b,"c"', 'x,"",z', "a,b\\,c", "a\\,b,c", "a,b\x00,c", "a,b\x01,c", "a,b\x7f,c", "a,\u2028,c",
    "\ufeffa,b,c", "a;b;c", "#a,b,c", 'a,b,c"', "a,b, ", " , , ",
]
CSV_INVALID_UTF8 = [b"a,\xff,c", b"a,\xc3,c", b"a,\xed\xa0\x80,c", b"a,\xc0\xaf,c", b"a,\xf4\x90\x80\x80,c",
                    b"a,\xe2\x82,c", b"a,\xc3\xa9,c"]
JSON_PLAIN = [
    '{"ts": "2026-11-20T05:00:00Z", "url": "/a", "n": 3}', '{"url":"/b","ts":"x","n":-12,"other":1.5e3}',
    '{"n": 0, "url": "caf\u00e9 \U0001f600", "ts": null, "x": [1, {"y": "z"}, []], "z": {}}',
    '{"ts": true, "url": false, "n": "3"}', "{}", ' {"ts": "a"} ', '{"url": "a\\"b\\\\c\\/d\\n\\u00e9\\u0041"}',
    '{"other": "q\\"", "n": 123456789012345678}', '{"a":{"b":{"c":[[[1]]]}},"ts":"t"}',
]
JSON_HOSTILE = [
    "", " ", "{", "}", "{}x", '{"ts": "a"} x', '{"ts": "a",}', "[1, 2]", '"s"', "null", "1", '{"ts": -0}',
    '{"ts": 1.50}', '{"ts": 1e2}', '{"ts": 1E+2}', '{"ts": 00}', '{"ts": 01}', '{"ts": -}', '{"ts": 1.}',
    '{"ts": .5}', '{"ts": NaN}', '{"ts": Infinity}', '{"ts": -Infinity}', '{"x": NaN}', "{'ts': 'a'}",
    '{"ts": \'a\'}', '{ts: "a"}', '{"ts": "a", "ts": "b"}', '{"TS": "a"}', '{"t\\u0073": "a"}',
    '{"ts": "a\\x"}', '{"ts": "\\ud83d\\ude00"}', '{"ts": "\\ud83d"}', '{"x": "\\udc00"}', '{"ts": "\\u00"}',
    '{"ts": {"a": 1}}', '{"ts": [1]}', '{"ts": 1234567890123456789}', '{"ts": 12345678901234567890123}',
    '{"ts": "a\x01b"}', '{"x": "a\x00b"}', '{"ts": tru}', '{"ts": truex}', '{"ts": nul}', '{"ts":true1}',
    '/*c*/{"ts": "a"}', '{"ts": "a"}/*c*/', "\ufeff{}", '{"x": ' + "[" * 40 + "]" * 40 + "}",
    '{"x": ' + "[" * 31 + "]" * 31 + "}", '{"x": 1' + "0" * 120 + "}", '{"ts": "a"}\t', '{"ts":"a"}\x0b',
    '{"ts":"\t"}', '{"x": [1,]}', '{"x": [,1]}', '{"x": {"a" 1}}', '{"x": {1: 2}}', '{"ts": "a" "b"}',
]
JSON_INVALID_UTF8 = [b'{"ts": "\xff"}', b'{"x": "\xc3"}', b'{"ts": "\xed\xa0\x80"}', b'{"\xc0\xaf": 1}',
                     b'{"ts": "\xc3\xa9"}']


def fields(spark, lines: list[bytes], fmt: str, sep: str = ",") -> list[tuple]:
    """Each line's (Java's fields, or None where it leaves the line; Spark's fields),
    every field as text, the last one whether the line was corrupt for the parser."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(line, i) for i, line in enumerate(lines)], "raw binary, i int").withColumn(
        "value", F.col("raw").cast("string"))
    schema = ", ".join(f"{c} string" for c in [*NAMES, "_corrupt"])
    if fmt == "csv":
        java = F.call_function(readers.CSV_FIELDS, "raw", F.lit(sep), F.lit(len(NAMES)))
        ours = F.from_csv("value", schema, {"sep": sep, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    else:
        java = F.call_function(readers.JSON_FIELDS, "raw", F.lit("\0".join(NAMES)))
        ours = F.from_json("value", schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"})
    rows = frame.select("i", java.alias("java"), ours.alias("spark")).orderBy("i").collect()

    def shape(values):
        return None if values is None else (*values[:len(NAMES)], values[len(NAMES)] is not None)

    return [(shape(r["java"]), None if r["spark"] is None else shape(list(r["spark"]))) for r in rows]


def assert_same(spark, lines: list, fmt: str, sep: str = ",") -> list[bool]:
    """Every line Java answers has Spark's fields; whether each line was answered."""
    raw = [line if isinstance(line, bytes) else line.encode() for line in lines]
    got = fields(spark, raw, fmt, sep)
    differ = [(lines[i], java, ours) for i, (java, ours) in enumerate(got) if java is not None and java != ours]
    assert not differ, f"{len(differ)} of {len(lines)} lines read otherwise than Spark, e.g. {differ[:3]}"
    return [java is not None for java, _ in got]


@pytest.fixture(scope="module")
def java(spark):
    assert readers._in_java(spark), "the readers' Java functions are not registered: no JDK beside the driver?"


@pytest.mark.parametrize("sep", [",", ";", "\t", "|"])
def test_csv_fields_are_from_csv_fields_on_hostile_lines(spark, java, sep):
    plain = [line.replace(",", sep) for line in CSV_PLAIN if sep not in line or sep == ","]
    answered = assert_same(spark, plain + [line.replace(",", sep) for line in CSV_HOSTILE] + CSV_INVALID_UTF8,
                           "csv", sep)
    assert all(answered[:len(plain)]), "a plain line was left to from_csv"


def test_csv_fields_on_random_edits_of_plain_lines(spark, java):
    rng = random.Random(25)
    lines = edited(rng, CSV_PLAIN, 3000, list(',,,"\\ \t\x00\x1f\u00e9abc'), [1, 1, 2, 3])
    answered = assert_same(spark, lines, "csv")
    assert 0.3 < sum(answered) / len(lines) < 0.95, "random edits should both keep and leave the fast path"


def test_json_fields_are_from_json_fields_on_hostile_lines(spark, java):
    answered = assert_same(spark, JSON_PLAIN + JSON_HOSTILE + JSON_INVALID_UTF8, "json")
    assert all(answered[:len(JSON_PLAIN)]), "a plain line was left to from_json"
    assert not any(answered[len(JSON_PLAIN) + 2:len(JSON_PLAIN) + 8]), "malformed lines are from_json's"


def test_json_fields_on_random_edits_of_plain_lines(spark, java):
    rng = random.Random(27)
    plain = JSON_PLAIN + [json.dumps({"ts": f"2026-11-20T05:{i:02d}:00Z", "url": f"/p{i}", "n": i, "o": [i, None]})
                          for i in range(20)]
    lines = edited(rng, plain, 4000, list('{}[]"\\:, \t0123456789-.eE+nulltrefas\u00e9\x01/u'), [1, 1, 2, 3])
    answered = assert_same(spark, lines, "json")
    assert 0.2 < sum(answered) / len(lines) < 0.95, "random edits should both keep and leave the fast path"
