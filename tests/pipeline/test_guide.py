"""The guide's pipeline (docs/guide.md), built from the guide's own code blocks and run with
`airflow dags test` on the stack: an hour commits, in the second database's table, the
topic and the Iceberg table exactly as computed here from the input; an hour of bad lines
is rolled back, nothing of it visible; a replace swaps the first hour's rows in all three.
(That a replace leaves the other hours alone, tests/pipeline/test_hourly_pipeline.py shows
on the hourly example.)"""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter
from datetime import datetime, time, timedelta, timezone

import psycopg2
import pytest

from guide_blocks import write_project
from hourly_data import HourRun
from support import count_iceberg_rows, fresh_day, header, read_topic
from twophase.ids import load_id_for
from twophase.log import PostgresLog
from twophase.protocol.states import State
from warm_airflow import dags_test

pytestmark = pytest.mark.slow
DAG_ID = "page_views_hourly"
TABLE, TOPIC, ICEBERG = "web.page_views", "page-views", "web.page_views"


def write_hour(data, hour: datetime, views: int, seed: int, bad: int = 1) -> dict[str, tuple[int, int]]:
    """An hour's CSV file of `views` page views and `bad` bad lines; {url: (views, visitors)}."""
    rng, lines, seen = random.Random(seed), ["ts,url,user_id"], {}
    for _ in range(views):
        url, user = f"/p{rng.randrange(6)}", f"u{rng.randrange(20)}"
        at = (hour + timedelta(seconds=rng.randrange(3600))).isoformat().replace("+00:00", "Z")
        lines.append(f"{at},{url},{user}")
        seen.setdefault(url, []).append(user)
    lines += [f"not a time,/p{i},u1" for i in range(bad)]
    folder = data / f"{hour:%Y-%m-%d/%H}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.csv").write_text("\n".join(lines) + "\n")
    return {url: (len(users), len(set(users))) for url, users in seen.items()}


def run(project, data, hour: datetime, conf: dict | None = None) -> HourRun:
    env = {**os.environ, "PAGE_VIEWS_DATA": str(data), "AIRFLOW__CORE__DAGS_FOLDER": str(project / "dags")}
    proc = dags_test([DAG_ID, (hour + timedelta(hours=1)).isoformat(), "-c", json.dumps(conf or {})], env, project,
                     timeout=900)
    output = proc.stdout + proc.stderr
    finished = re.findall(r"DagRun Finished: .*? run_id=(\S+), .*? state=(\w+)", output)
    assert finished, f"the DAG run did not finish (exit {proc.returncode}):\n{output[-4000:]}"
    return HourRun(*finished[-1], output)


def table_rows(dsn: str, hour: datetime) -> dict[str, tuple[int, int, str]]:
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"select url, views, visitors, load_id from {TABLE} where hour = %s", (hour,))
        return {url: (views, visitors, lid) for url, views, visitors, lid in cur.fetchall()}


def topic_values(bootstrap: str, load_id: str) -> dict[str, tuple[int, int]]:
    values = [json.loads(m.value()) for m in read_topic(bootstrap, TOPIC) if header(m, "load_id") == load_id]
    return {v["url"]: (v["views"], v["visitors"]) for v in values}


def test_the_guides_pipeline_loads_an_hour_rolls_back_a_bad_one_and_replaces_the_first(tmp_path, pg_dsn, reporting_dsn,
                                                                                        kafka_bootstrap):
    project, data, log = write_project(tmp_path / "project"), tmp_path / "views", PostgresLog(pg_dsn)
    day = fresh_day(pg_dsn, DAG_ID)
    good, bad_hour = (datetime.combine(day, time(h), tzinfo=timezone.utc) for h in (5, 6))
    expected = write_hour(data, good, 50, seed=1)
    done = run(project, data, good)
    assert done.state == "success", done.output[-4000:]
    first = load_id_for(DAG_ID, done.run_id)
    assert (log.get(first).state, log.get(first).dag_id) == (State.COMMITTED, DAG_ID)
    assert table_rows(reporting_dsn, good) == {url: (*n, first) for url, n in expected.items()}
    assert topic_values(kafka_bootstrap, first) == expected
    assert count_iceberg_rows(ICEBERG, first) == len(expected)
    metrics = log.get(first).metrics
    assert (metrics["input_lines"], metrics["rejected_by_reason"], metrics["header_lines"]) == (52, {"bad_ts": 1}, 1)
    # The prepare's log is the job's own lines: Spark's INFO lines are left out (but the
    # three that name its version, before the level is set).
    prepare = done.task_log("prepare")
    assert "twophase.prepare: prepare finished in" in prepare and "twophase.readers: read 52 lines" in prepare
    assert "Java functions twophase_csv_fields, twophase_json_fields registered from" in prepare, prepare
    assert " INFO DAGScheduler: " not in prepare and " INFO Executor: " not in prepare
    assert len(prepare.splitlines()) < 80, prepare

    # An hour of bad lines only: rolled back, named, nothing of it anywhere.
    write_hour(data, bad_hour, 0, seed=4, bad=30)
    bad = run(project, data, bad_hour)
    lid = load_id_for(DAG_ID, bad.run_id)
    load = log.get(lid)
    assert bad.state == "failed" and load.state == State.ABORTED, load
    assert "audit: row_count(web.page_views) is 0, outside >= 1" in load.reason
    assert "rejected input lines: 30 (by reason: {'bad_ts': 30})" in bad.task_log("rollback")
    assert table_rows(reporting_dsn, bad_hour) == {} and topic_values(kafka_bootstrap, lid) == {}
    assert count_iceberg_rows(ICEBERG, lid) == 0

    # Replace: the first hour's new input swaps its rows in all three targets at once.
    expected = write_hour(data, good, 25, seed=99, bad=0)
    replaced = run(project, data, good, {"mode": "replace"})
    assert replaced.state == "success", replaced.output[-4000:]
    lid = load_id_for(DAG_ID, replaced.run_id)
    assert table_rows(reporting_dsn, good) == {url: (*n, lid) for url, n in expected.items()}
    assert topic_values(kafka_bootstrap, lid) == expected
    assert (count_iceberg_rows(ICEBERG, lid), count_iceberg_rows(ICEBERG, first)) == (len(expected), 0)
    assert table_rows(reporting_dsn, bad_hour) == {}
    assert Counter(x.state for x in log.recent(100, DAG_ID) if x.data_interval_start.date() == day) == {
        State.COMMITTED: 2, State.ABORTED: 1}
