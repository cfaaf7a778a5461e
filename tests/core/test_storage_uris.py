"""The example job's input and rejects as storage URIs, on real Spark and Postgres.

- given file:// URIs, a day commits with exact totals and every rejected line is at the
  rejects location, counted there;
- executors that write the rejects where the driver cannot read them (their own disk, as
  file:// is on a cluster) fail the load, naming both counts and the URI;
- an input folder that does not exist refuses the load at begin, and input files the
  executors cannot see fail it, with the URI in the reason;
- the example DAGs build hdfs:// and s3a:// locations without losing a '/'.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from datetime import date, datetime, timedelta, timezone

import psycopg2
import pytest

from orders_sample.generate import generate
from own_disk_executors import submit_prepare
from pipeline.expected import _valid, expected_totals
from support import ROOT, count_table_rows, create_schema
from twophase.ids import load_id_for
from twophase.participants.postgres import PostgresTarget
from twophase.log import UnknownLoad
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.sources import SourceError
from twophase.sources.files import FilesSource
from twophase.spec import LoadSpec

DAY = date(2026, 11, 20)


@pytest.fixture
def tables(pg_dsn, unique_name):
    """Fresh tables shaped like the example's per-customer and summary tables."""
    names = {"": f"core_tests.{unique_name}", "summary": f"core_tests.{unique_name}_sum"}
    with psycopg2.connect(pg_dsn) as conn, conn.cursor() as cur:
        create_schema(cur, "core_tests")
        cur.execute(f"""create table {names['']} (customer_id text not null, day date not null, orders int not null,
            revenue numeric(14, 2) not null, first_order_at timestamptz not null, last_order_at timestamptz not null,
            load_id text not null, primary key (day, customer_id))""")
        cur.execute(f"""create table {names['summary']} (day date primary key, orders int not null,
            revenue numeric(16, 2) not null, customers int not null, rejected_lines int not null,
            load_id text not null)""")
    return names


def begin(txlog, tables, run_id: str, data) -> LoadSpec:
    """Begin a load of the example job reading `data`/landing/date=DAY, as the DAG
    describes it (its source the day's folder, listed now), the locations as file:// URIs."""
    spec = LoadSpec(load_id=load_id_for("core_tests", run_id), pipeline="core_tests", run_id=run_id,
                    targets=(PostgresTarget(tables[""]), PostgresTarget(tables["summary"], frame="summary")),
                    input={"date": DAY.isoformat(), "rejects": f"file://{data}/rejects/date={DAY}/load={run_id}"},
                    source=FilesSource(f"file://{data}/landing/date={DAY}", "interval"))
    return coordinator.begin(txlog, spec).spec()


def aborted_because(txlog, conns, tables, load_id: str) -> str:
    """The vote's reason for a load whose prepare failed; rolls it back, nothing visible."""
    decided = coordinator.vote(txlog, conns, load_id)
    assert decided.state == State.ABORTING
    coordinator.rollback(txlog, conns, load_id)
    assert txlog.get(load_id).state == State.ABORTED
    assert all(count_table_rows(conns.pg_dsn, t, load_id) == 0 for t in tables.values())
    return decided.reason


@pytest.fixture
def utc(spark):
    """The session time zone the prepare frame sets (twophase.spark.job.run)."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


def test_file_uris_commit_exactly_and_every_rejected_line_is_kept(utc, txlog, conns, tables, tmp_path, unique_name):
    import orders_daily_totals

    spark = utc
    made = generate(tmp_path / "landing", DAY, 3000, bad_share=0.03)
    spec = begin(txlog, tables, unique_name, tmp_path)
    output = orders_daily_totals.build(spark, spec)
    coordinator.prepare(txlog, conns, spec.load_id, output.df, output.metrics)
    assert coordinator.vote(txlog, conns, spec.load_id).state == State.COMMITTING
    coordinator.commit(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.COMMITTED

    expected, lines, rejected = expected_totals(made.folder, DAY)
    assert rejected == made.bad_lines > 0
    assert (output.metrics["input_lines"], output.metrics["rejected_lines"]) == (lines, rejected)
    with psycopg2.connect(conns.pg_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select customer_id, orders, revenue, first_order_at, last_order_at from {tables['']} "
                    "where load_id = %s", (spec.load_id,))
        assert {r[0]: r[1:] for r in cur.fetchall()} == {c: (t.orders, t.revenue, t.first, t.last)
                                                          for c, t in expected.items()}
        cur.execute(f"select orders, customers, rejected_lines from {tables['summary']} where load_id = %s",
                    (spec.load_id,))
        assert cur.fetchall() == [(lines - rejected, len(expected), rejected)]

    # Every rejected line of the input is at the rejects URI, counted there, each once.
    kept = tmp_path / "rejects" / f"date={DAY}" / f"load={unique_name}"
    records = [json.loads(line) for p in sorted(kept.glob("part-*")) for line in p.read_text().splitlines()]
    assert spark.read.text(spec.input["rejects"]).count() == len(records) == rejected
    bad_lines = Counter((p.name, line) for p in sorted(made.folder.glob("*.jsonl"))
                        for line in p.read_text().splitlines() if line.strip() and _valid(line, DAY) is None)
    assert Counter((r["file"].rsplit("/", 1)[1], r["line"]) for r in records) == bad_lines


def test_a_missing_input_folder_refuses_the_load_at_begin_with_its_uri(txlog, tables, tmp_path, unique_name):
    with pytest.raises(SourceError) as refused:
        begin(txlog, tables, unique_name, tmp_path)  # nothing landed under tmp_path
    assert str(refused.value) == f"files:file://{tmp_path}/landing/date={DAY}: the folder does not exist"
    with pytest.raises(UnknownLoad):
        txlog.get(load_id_for("core_tests", unique_name))


def test_a_file_that_grows_after_begin_fails_the_load_naming_it(utc, txlog, conns, tables, tmp_path, unique_name):
    """Begin lists the day; a line is appended to one file before the job reads it: the
    load's prepare fails naming the file and both sizes, and nothing is loaded."""
    import orders_daily_totals

    made = generate(tmp_path / "landing", DAY, 1000, bad_share=0.0)
    spec = begin(txlog, tables, unique_name, tmp_path)
    grown = sorted(made.folder.glob("*.jsonl"))[0]
    before = grown.stat().st_size
    late = '{"order_id": "late-1", "customer_id": "c1", "amount": 1.00, "ordered_at": "%sT12:00:00Z"}\n' % DAY
    with grown.open("a") as f:
        f.write(late)
    output = orders_daily_totals.build(utc, spec)
    with pytest.raises(SourceError) as failed:
        coordinator.prepare(txlog, conns, spec.load_id, output.df, output.metrics)
    coordinator.record_prepare_error(txlog, spec.load_id, failed.value)  # as the prepare frame does
    assert aborted_because(txlog, conns, tables, spec.load_id) == (
        f"prepare failed: SourceError: the input changed while the load read it: file://{grown} changed after the "
        f"load listed it: {before} bytes then, {before + len(late)} now")


def test_rejects_executors_keep_on_their_own_disk_fail_the_load(txlog, conns, tables, tmp_path, unique_name):
    """Executors write the rejects to their own disk (file:// on a cluster): the driver's
    count after the write finds none, and the load fails naming both counts and the URI."""
    data = tmp_path / "data"
    made = generate(data / "landing", DAY, 2000, bad_share=0.05)
    (data / "rejects").mkdir()
    spec = begin(txlog, tables, unique_name, data)
    proc = submit_prepare(tmp_path, "orders_daily_totals.py", spec.load_id, hidden=data / "rejects")
    assert proc.returncode != 0, proc.stdout[-3000:]
    uri = spec.input["rejects"]
    cause = (f"RejectsNotKept: the job rejected {made.bad_lines} lines but 0 are at {uri} after the write (file:// is "
             "the disk of the machine that writes: on a cluster, executors keep them on their own disks; use "
             "hdfs:// or s3a://)")
    assert txlog.get(spec.load_id).prepare_error == cause
    assert "rejected lines kept in" not in proc.stdout
    assert aborted_because(txlog, conns, tables, spec.load_id) == f"prepare failed: {cause}"
    folder = data / "rejects" / f"date={DAY}" / f"load={unique_name}"
    assert not list(folder.glob("part-*")), "the driver's disk holds none of the rejected lines"


def test_input_files_the_executors_cannot_see_fail_with_the_files_uri(txlog, conns, tables, tmp_path, unique_name):
    """The driver lists the day's files; the executors, on a disk of their own, find none."""
    data = tmp_path / "data"
    made = generate(data / "landing", DAY, 500, bad_share=0.0)
    spec = begin(txlog, tables, unique_name, data)
    proc = submit_prepare(tmp_path, "orders_daily_totals.py", spec.load_id, hidden=data / "landing")
    assert proc.returncode != 0, proc.stdout[-3000:]
    files = "|".join(re.escape(f"file://{p}") for p in sorted(made.folder.glob("*.jsonl")))
    cause = txlog.get(spec.load_id).prepare_error
    assert re.fullmatch(rf"FileNotFoundError: input file ({files}) was listed but is missing where Spark's executors "
                        r"read it \(deleted meanwhile, or a file:// input on a cluster, which is each worker's own "
                        r"disk: use hdfs:// or s3a://\)", cause), cause
    assert aborted_because(txlog, conns, tables, spec.load_id) == f"prepare failed: {cause}"


@pytest.mark.parametrize("data, landing, rejects", [
    ("hdfs://namenode:8020/data/orders", "hdfs://namenode:8020/data/orders/landing/date=2026-11-20",
     "hdfs://namenode:8020/data/orders/rejects/date=2026-11-20/load=L"),
    ("s3a://orders-bucket/", "s3a://orders-bucket/landing/date=2026-11-20",
     "s3a://orders-bucket/rejects/date=2026-11-20/load=L"),
    ("/srv/orders", "file:///srv/orders/landing/date=2026-11-20", "file:///srv/orders/rejects/date=2026-11-20/load=L"),
])
def test_the_dags_build_uris_under_orders_data(monkeypatch, data, landing, rejects):
    from twophase_airflow import Interval

    monkeypatch.setenv("ORDERS_DATA", data)
    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    daily_dag, hourly_dag = _dag_module("orders_daily_totals"), _dag_module("orders_hourly_totals")
    day = Interval(start, start + timedelta(days=1))
    assert daily_dag.describe_input(day, {}, "L") == {"date": "2026-11-20", "rejects": rejects}
    assert daily_dag.day_folder(day) == landing
    hour = Interval(start + timedelta(hours=5), start + timedelta(hours=6))
    assert (hourly_dag.day_folder(hour), hourly_dag.describe_input(hour, {}, "L")["rejects"]) == (landing, rejects)


@pytest.mark.parametrize("data, why", [
    ("orders", "it is a relative path"),
    ("s3://orders-bucket/x", "its scheme 's3' is not one this pipeline reads and writes"),
    ("hdfs:/namenode/data", "it has no '//' after 'hdfs:'"),
])
def test_a_bad_orders_data_names_the_value_and_the_setting(monkeypatch, data, why):
    from twophase.spark.storage import StorageURIError
    from twophase_airflow import Interval

    monkeypatch.setenv("ORDERS_DATA", data)
    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    with pytest.raises(StorageURIError, match=f"^ORDERS_DATA '{re.escape(data)}' is not a storage location: "
                                              f"{re.escape(why)}"):
        _dag_module("orders_daily_totals").describe_input(Interval(start, start + timedelta(days=1)), {}, "L")


def _dag_module(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_dag", ROOT / "dags" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
