"""A pipeline is one DAG's (coordinator.begin): its loads record the DAG that began them
(LoadSpec.dag_id), and a load of the pipeline from another DAG is refused before anything
is logged. In-memory log (test_coordinator.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from test_coordinator import make_spec
from twophase.log import MemoryLog
from twophase.protocol import coordinator


def test_the_dag_is_logged_with_the_load_and_read_back():
    log = MemoryLog()
    spec = replace(make_spec("run-1"), dag_id="orders_daily")
    load = coordinator.begin(log, spec)
    assert load.dag_id == "orders_daily" and load.spec().dag_id == "orders_daily"
    assert coordinator.begin(log, replace(make_spec("run-2"))).dag_id is None  # begun outside Airflow: no DAG


def test_a_load_of_the_pipeline_from_another_dag_is_refused_and_nothing_logged():
    log = MemoryLog()
    coordinator.begin(log, replace(make_spec("run-1"), dag_id="orders_daily"))
    intruder = replace(make_spec("run-2"), dag_id="orders_backfill")
    with pytest.raises(coordinator.PipelineOfAnotherDag) as refused:
        coordinator.begin(log, intruder)
    assert str(refused.value).startswith("pipeline unit is loaded by DAG orders_daily, not by orders_backfill: two "
                                         "DAGs of one pipeline would give their runs the same load ids.")
    assert [x.load_id for x in log.recent(10, "unit")] == [make_spec("run-1").load_id]
    assert coordinator.begin(log, replace(make_spec("run-3"), dag_id="orders_daily")).dag_id == "orders_daily"
