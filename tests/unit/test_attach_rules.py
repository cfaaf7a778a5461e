"""PostgresTarget(publish="attach") without a server (docs/adr/0013): what the target
accepts, how a load's interval becomes the partition's bounds and name, the Airflow
Table's glue and the table it makes. tests/core/test_attach_publish.py proves the publish
itself against the stack's Postgres."""

from __future__ import annotations

from datetime import date

import pytest

from twophase.participants.postgres import PostgresTarget
from twophase.participants.postgres.partition import bounds, partition_name
from twophase.participants.postgres.server import PostgresConfigError
from twophase.spec import LoadSpec, SpecError, target_from_json, target_to_json
from twophase_airflow import Table

DAY = ("2026-11-20T00:00:00+00:00", "2026-11-21T00:00:00+00:00")


def _spec(target, interval=DAY) -> LoadSpec:
    return LoadSpec(load_id="p.run", pipeline="p", run_id="run", targets=(target,), data_interval=interval)


def test_the_loads_interval_becomes_the_targets_and_is_logged_with_it():
    [target] = _spec(PostgresTarget("a.t", "replace", publish="attach")).targets
    assert target.interval == DAY and target.replaced == {"partition": list(DAY)}
    assert target_from_json(target_to_json(target)) == target
    [plain] = _spec(PostgresTarget("a.t", "replace", {"day": "2026-11-20"})).targets
    assert plain.interval == () and plain.replaced == {"day": "2026-11-20"}


@pytest.mark.parametrize("make, why", [
    (lambda: PostgresTarget("a.t", publish="copy"), "publish must be one of"),
    (lambda: PostgresTarget("a.t", "replace", {"day": 1}, publish="attach"), "takes no replace_where"),
    (lambda: PostgresTarget("a.t", "replace"), "needs replace_where"),
    (lambda: _spec(PostgresTarget("a.t", publish="attach"), None), "the load has no data interval"),
])
def test_what_a_target_cannot_be_is_refused_naming_it(make, why):
    with pytest.raises(SpecError, match=why):
        make()


@pytest.mark.parametrize("kind, interval, expected", [
    ("date", DAY, ("2026-11-20", "2026-11-21")),
    ("date", ("2026-11-20T01:00:00+01:00", "2026-11-22T00:00:00+00:00"), ("2026-11-20", "2026-11-22")),
    ("timestamp with time zone", ("2026-11-20T06:00:00+00:00", "2026-11-20T07:00:00+00:00"),
     ("2026-11-20T06:00:00+00:00", "2026-11-20T07:00:00+00:00")),
    ("timestamp without time zone", ("2026-11-20 06:00:00+00:00", "2026-11-20 07:00:00+00:00"),
     ("2026-11-20 06:00:00", "2026-11-20 07:00:00")),
])
def test_an_interval_is_the_bounds_of_the_keys_type(kind, interval, expected):
    assert bounds(PostgresTarget("a.t", publish="attach", interval=interval), kind) == expected


@pytest.mark.parametrize("interval", [("2026-11-20T00:00:00+00:00", "2026-11-20T06:00:00+00:00"),
                                      ("2026-11-20T00:00:00+01:00", "2026-11-21T00:00:00+01:00")])
def test_a_date_key_takes_whole_days_of_utc_only(interval):
    with pytest.raises(PostgresConfigError, match="is not whole days"):
        bounds(PostgresTarget("a.t", publish="attach", interval=interval), "date")


def test_a_partition_is_named_after_its_table_and_start():
    assert partition_name(PostgresTarget("a.totals"), "2026-11-20") == "totals_p20261120"
    assert partition_name(PostgresTarget("a.totals"), "2026-11-20T06:00:00+00:00") == "totals_p20261120t060000"
    assert partition_name(PostgresTarget("a.totals"), "2026-11-20 06:00:00") == "totals_p20261120t060000"
    long = partition_name(PostgresTarget("a." + "x" * 63), "2026-11-20")
    assert len(long) == 63 and long.endswith("_p20261120")


def test_an_airflow_table_publishes_by_attach_and_makes_its_table_partitioned():
    table = Table("a.t", schema={"day": "date", "n": "int"}, key=("day",), publish="attach")
    target = table.core("replace", (date(2026, 11, 20), date(2026, 11, 21)), "")
    assert (target.mode, target.replace_where, target.publish) == ("replace", {}, "attach")
    assert table.setup_sql().endswith(") partition by range (day);")
    assert Table("a.t", schema={"day": "date"}).setup_sql().endswith("\n);")
    with pytest.raises(SpecError, match="a key that includes it"):
        Table("a.t", schema={"day": "date", "n": "int"}, key=("n",), publish="attach")
    with pytest.raises(SpecError, match="needs one"):
        Table("a.t", interval_column="", publish="attach")
