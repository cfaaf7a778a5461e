"""The hourly example end to end: two consecutive hours of one day each commit once, in
the table and the topic; a committed hour is "nothing to do" in append mode; replace
swaps one hour's rows and leaves the other hour alone."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, time, timedelta, timezone
from decimal import Decimal

import pytest

from hourly_data import DAG_ID, ROOT, TOPIC, expected_hour, fresh_day, hour_rows, loads_of_hour, run_hour
from orders_sample.generate import generate
from support import header, read_topic
from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.ops.verify import verify
from twophase.spec import SpecError
from twophase_airflow.config import Interval

pytestmark = pytest.mark.slow


def assert_hour_loaded(pg_dsn, kafka_bootstrap, folder, hour, load_id):
    """The hour's rows, in the table and the topic, are exactly the expected totals of
    the load; its metrics account for every line of the day's folder."""
    expected = expected_hour(folder, hour)
    assert expected.totals, "the sample has no order in the hour"
    assert hour_rows(pg_dsn, hour) == {c: (n, revenue, load_id) for c, (n, revenue) in expected.totals.items()}
    records = [m for m in read_topic(kafka_bootstrap, TOPIC) if header(m, "load_id") == load_id]
    values = {m.key().decode(): json.loads(m.value(), parse_float=Decimal) for m in records}
    assert len(records) == len(values) == len(expected.totals)
    for customer, (n, revenue) in expected.totals.items():
        value = values[customer]
        assert (value["customer_id"], value["orders"], value["revenue"]) == (customer, n, revenue)
        assert datetime.fromisoformat(value["hour"]) == hour
    metrics = PostgresLog(pg_dsn).get(load_id).metrics
    orders = sum(n for n, _ in expected.totals.values())
    assert (metrics["input_lines"], metrics["orders"], metrics["other_hours_lines"], metrics["rejected_lines"]) == \
        (expected.lines, orders, expected.other_hours, expected.rejected)
    assert metrics["input_lines"] == (metrics["orders"] + metrics["duplicate_lines"] + metrics["other_hours_lines"]
                                      + metrics["rejected_lines"] + metrics["blank_lines"])
    return records


def test_two_hours_commit_once_each_and_replace_swaps_one(orders_data, pg_dsn, kafka_bootstrap):
    day = fresh_day(pg_dsn)
    first_hour = datetime.combine(day, time(5), tzinfo=timezone.utc)
    second_hour = first_hour + timedelta(hours=1)
    made = generate(orders_data / "landing", day, 4800, bad_share=0.01, customers=60)

    for hour in (first_hour, second_hour):
        run = run_hour(orders_data, hour)
        assert run.state == "success", run.output[-4000:]
        # The run's data interval is the hour that ends at its logical date.
        [(load_id, state, end)] = loads_of_hour(pg_dsn, hour)
        assert state == "COMMITTED" and end == hour + timedelta(hours=1)
        assert f"for {hour.isoformat()} .. {end.isoformat()}" in run.task_log("begin")
        assert_hour_loaded(pg_dsn, kafka_bootstrap, made.folder, hour, load_id)
    [(kept_id, _, _)] = loads_of_hour(pg_dsn, first_hour)
    [(first_id, _, _)] = loads_of_hour(pg_dsn, second_hour)
    kept_rows = hour_rows(pg_dsn, first_hour)

    # Append mode: a committed hour is loaded once; the run is green and begins no load.
    again = run_hour(orders_data, second_hour)
    assert again.state == "success", again.output[-4000:]
    assert f"was already committed by load {first_id}" in again.task_log("begin")
    assert "[DAG TEST] starting task_id=prepare" not in again.output
    assert len(loads_of_hour(pg_dsn, second_hour)) == 1

    # New input for the day; replace swaps the second hour's rows only.
    made = generate(orders_data / "landing", day, 6000, bad_share=0.0, customers=45)
    replaced = run_hour(orders_data, second_hour, {"mode": "replace"})
    assert replaced.state == "success", replaced.output[-4000:]
    (_, s1, _), (second_id, s2, _) = loads_of_hour(pg_dsn, second_hour)
    assert (s1, s2) == ("COMMITTED", "COMMITTED") and "replaces " + first_id in replaced.task_log("begin")
    records = assert_hour_loaded(pg_dsn, kafka_bootstrap, made.folder, second_hour, second_id)
    assert {(header(m, "twophase.mode"), header(m, "twophase.replaces")) for m in records} == {("replace", first_id)}
    assert hour_rows(pg_dsn, first_hour) == kept_rows and {r[2] for r in kept_rows.values()} == {kept_id}

    log = PostgresLog(pg_dsn)
    loads = [log.get(lid) for hour in (first_hour, second_hour) for lid, _, _ in loads_of_hour(pg_dsn, hour)]
    findings = verify(log, Connections(pg_dsn, kafka_bootstrap), loads)
    assert findings and all(f.ok for f in findings), findings


def test_a_run_is_an_hour_never_a_day(orders_data, pg_dsn):
    # No `date` param: the trigger key is refused before anything is logged (by the wait for
    # the input, the run's first task: it does not wait for a run that cannot begin).
    day = fresh_day(pg_dsn)
    hour = datetime.combine(day, time(9), tzinfo=timezone.utc)
    run = run_hour(orders_data, hour, {"date": day.isoformat()})
    assert run.state == "failed" and "unknown trigger parameter 'date'" in run.task_log("wait_for_input")
    assert "no load was begun: unknown trigger parameter 'date'" in run.task_log("finish")
    assert loads_of_hour(pg_dsn, hour) == []
    # A run without a data interval falls back to a whole day (twophase_airflow.tasks):
    # the DAG's describe_input refuses it, and an interval across midnight.
    spec = importlib.util.spec_from_file_location("hourly_dag", ROOT / "dags" / f"{DAG_ID}.py")
    dag_file = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dag_file)
    midnight = datetime.combine(day, time(0), tzinfo=timezone.utc)
    for start, end in ((midnight, midnight + timedelta(days=1)), (midnight - timedelta(minutes=30),
                                                                   midnight + timedelta(minutes=30))):
        with pytest.raises(SpecError, match="loads one hour of one day"):
            dag_file.describe_input(Interval(start, end), {}, "load")
    described = dag_file.describe_input(Interval(hour, hour + timedelta(hours=1)), {}, "load")
    assert (described["start"], described["end"]) == (hour.isoformat(), (hour + timedelta(hours=1)).isoformat())
    assert dag_file.day_folder(Interval(hour, hour + timedelta(hours=1))).endswith(f"landing/date={day.isoformat()}")


def test_an_hour_whose_input_does_not_land_in_time_fails_naming_its_folder(orders_data, pg_dsn):
    """The wait (here 0 s: one look) gives up on a day folder that is not there: the run
    fails without beginning a load, and its finish says which folder and why."""
    day = fresh_day(pg_dsn)
    hour = datetime.combine(day, time(7), tzinfo=timezone.utc)
    run = run_hour(orders_data, hour, env={"ORDERS_HOURLY_INPUT_WAIT_S": "0"})
    missing = f"the input did not land within 0 s: file://{orders_data}/landing/date={day}: the folder does not exist yet"
    assert run.state == "failed" and missing in run.task_log("wait_for_input"), run.output[-4000:]
    assert f"no load was begun: {missing}" in run.task_log("finish")
    assert "[DAG TEST] starting task_id=begin" not in run.output and loads_of_hour(pg_dsn, hour) == []
