"""The CSV and JSON-lines readers (twophase.spark.readers) on hostile lines, with the
stack's Spark: every line is a row, rejected with its reason, or counted blank or header;
the rows have the schema's types; the rejects carry file, detail and content; files the
listing does not read are in the metrics. No server: a folder source read in-process."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest

from twophase import metrics as job_metrics
from twophase.sources.files import FilesSource
from twophase.spark.readers import read_csv, read_json_lines
from twophase.spec import LoadSpec, SpecError
from twophase.participants.postgres import PostgresTarget

SCHEMA = {"ts": "timestamp", "url": "string", "views": "int", "share": "decimal(5,2)"}

CSV_LINES = {
    "ts,url,views,share": "header",
    "2026-11-20T05:00:00Z,/a,3,0.5": "row",
    '2026-11-20T05:10:00Z,"/b,c",1,1.25': "row",                # a quoted separator
    "": "blank",
    "   ": "blank",
    "2026-11-20T05:00:00Z,/a,3,0.5,extra": "too_many_fields",
    "2026-11-20T05:00:00Z,/a,3,0.5,": "too_many_fields",        # a separator more is a field more
    '2026-11-20T05:00:00Z,"/a",3,0.5,,x': "too_many_fields",
    "2026-11-20T05:00:00Z,/a,3,,x": "too_many_fields",           # the last column empty, one more after it
    "2026-11-20T05:00:00Z,,3,0.5": "missing_url",
    "2026-11-20T05:00:00Z,/a": "missing_views",
    "yesterday,/a,3,0.5": "bad_ts",
    "2026-11-20T05:00:00Z,/a,three,0.5": "bad_views",
    "2026-11-20T05:00:00Z,/a,99999999999,0.5": "bad_views",   # beyond an int
    "2026-11-20T05:00:00Z,/a,3,1234.5": "bad_share",            # beyond decimal(5,2)
    "2026-11-20T05:00:00Z,/ü\u00a0ñ,3,0.5": "row",             # any text in a string
}
JSON_LINES = {
    '{"ts": "2026-11-20T05:00:00Z", "url": "/a", "views": 3, "share": 0.5}': "row",
    '{"views": "3", "url": "/b", "ts": "2026-11-20T05:10:00Z", "share": "1.25", "other": [1]}': "row",
    '{"ts": "2026-11-20T05:20:00Z", "url": "/c\\u00e9", "views": 4, "share": 2, "x": {"y": [1, "\\""]}}': "row",
    '{"ts": "2026-11-20T05:00:00Z", "url": "/a", "views": 3, "share": 0.5, "url": "/b"}': "row",  # the last one
    "": "blank",
    "{not json": "malformed",
    "[1, 2]": "malformed",
    '"just a string"': "malformed",
    '{"ts": "2026-11-20T05:00:00Z", "views": 3, "share": 0.5}': "missing_url",
    '{"ts": "2026-11-20T05:00:00Z", "url": null, "views": 3, "share": 0.5}': "missing_url",
    '{"ts": "2026-11-20T05:00:00Z", "url": "/a", "views": 3.5, "share": 0.5}': "bad_views",
    '{"ts": "2026-11-20T05:00:00Z", "url": "/a", "views": true, "share": 0.5}': "bad_views",
    '{"ts": 5, "url": "/a", "views": 3, "share": 0.5}': "bad_ts",
}


def spec_of(folder, **files) -> LoadSpec:
    """A load of the folder's files as its source fixed them at begin."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text, encoding="utf-8")
    source = FilesSource(str(folder), "interval")
    fixed = source.open().fix([])
    return LoadSpec("l", "p", "r", targets=(PostgresTarget("web.t"),), source=source, source_range=fixed.to_json())


def kinds(read, lines: dict) -> dict:
    rejected = {r["content"]: r["reason"] for r in read.rejects.collect()}
    return {line: rejected.get(line, "row" if expected == "row" else expected) for line, expected in lines.items()}


@pytest.mark.parametrize("java", [True, False], ids=["java", "spark"])
def test_csv_lines_are_rows_rejects_with_reasons_blank_or_header(spark, tmp_path, java):
    text = "\n".join(CSV_LINES) + "\n"
    spec = spec_of(tmp_path / "in", views__csv=text, _SUCCESS="", **{".hidden": "x"})
    read = read_csv(spark, spec, SCHEMA, java=java)
    rejected = {r["content"]: r for r in read.rejects.collect()}
    assert {line: r["reason"] for line, r in rejected.items()} == {
        line: kind for line, kind in CSV_LINES.items() if kind not in ("row", "blank", "header")}
    assert rejected["yesterday,/a,3,0.5"]["detail"] == "ts yesterday is not a timestamp"
    assert rejected["yesterday,/a,3,0.5"]["source"].endswith("/in/views.csv")
    rows = sorted(read.rows.collect(), key=lambda r: r["ts"])
    assert [tuple(r) for r in rows] == [
        (datetime(2026, 11, 20, 5), "/a", 3, Decimal("0.50")),   # as Spark collects: the session's UTC
        (datetime(2026, 11, 20, 5), "/ü\u00a0ñ", 3, Decimal("0.50")),
        (datetime(2026, 11, 20, 5, 10), "/b,c", 1, Decimal("1.25"))]
    assert read.rows.dtypes == [("ts", "timestamp"), ("url", "string"), ("views", "int"), ("share", "decimal(5,2)")]
    expected_rejects = sum(k not in ("row", "blank", "header") for k in CSV_LINES.values())
    assert read.metrics == {
        "input_lines": len(CSV_LINES), "rejected_lines": expected_rejects,
        "rejected_by_reason": {"bad_share": 1, "bad_ts": 1, "bad_views": 2, "missing_url": 1, "missing_views": 1,
                               "too_many_fields": 4},
        "blank_lines": 2, "header_lines": 1,
        "skipped_files": 1, "skipped_bytes": 1, "skipped_paths": [{"path": ".hidden", "bytes": 1, "why": (
            "hidden name (starts with '_' or '.': a marker or a file being written)")}]}
    job_metrics.check(read.metrics)


@pytest.mark.parametrize("java", [True, False], ids=["java", "spark"])
def test_json_lines_are_rows_or_rejects_with_reasons(spark, tmp_path, java):
    spec = spec_of(tmp_path / "in", views__jsonl="\n".join(JSON_LINES) + "\n")
    read = read_json_lines(spark, spec, SCHEMA, java=java)
    rejected = {r["content"]: r["reason"] for r in read.rejects.collect()}
    assert rejected == {line: kind for line, kind in JSON_LINES.items() if kind not in ("row", "blank")}
    assert sorted((r["url"], r["views"], r["share"]) for r in read.rows.collect()) == [
        ("/a", 3, Decimal("0.50")), ("/b", 3, Decimal("0.50")), ("/b", 3, Decimal("1.25")),
        ("/c\u00e9", 4, Decimal("2.00"))]
    assert read.metrics["input_lines"] == len(JSON_LINES) and read.metrics["blank_lines"] == 1
    assert read.metrics["rejected_lines"] == len(rejected) == sum(read.metrics["rejected_by_reason"].values())
    job_metrics.check(read.metrics)


def test_optional_columns_may_be_missing_but_not_wrong(spark, tmp_path):
    spec = spec_of(tmp_path / "in", a__csv="2026-11-20T05:00:00Z,/a,,\n2026-11-20T05:00:00Z,/a,x,\n"
                   "2026-11-20T05:00:00Z,/a,,,x\n" '"2026-11-20T05:00:00Z","/a,""b""",,,"x,y"\n')
    read = read_csv(spark, spec, SCHEMA, header=False, optional=("views", "share"))
    assert [(r["views"], r["share"]) for r in read.rows.collect()] == [(None, None)]
    assert read.metrics["rejected_by_reason"] == {"bad_views": 1, "too_many_fields": 2}
    assert "header_lines" not in read.metrics
    with pytest.raises(SpecError, match=r"optional names \['nope'\], which are not columns of the schema"):
        read_csv(spark, spec, SCHEMA, optional=("nope",))


def test_a_schema_may_name_any_column_even_those_the_reader_uses_inside(spark, tmp_path):
    """Columns named as a line's text, its file or its verdict would be in Spark's frames."""
    spec = spec_of(tmp_path / "in", a__csv="1,x,2026-11-20\nnope,y,2026-11-20\n")
    read = read_csv(spark, spec, {"value": "int", "file": "string", "kind": "date"}, header=False)
    assert [tuple(r) for r in read.rows.collect()] == [(1, "x", date(2026, 11, 20))]
    assert [(r["reason"], r["content"]) for r in read.rejects.collect()] == [("bad_value", "nope,y,2026-11-20")]
