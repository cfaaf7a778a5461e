"""Deterministic ids."""

import pytest

from twophase import ids


def test_load_id_is_deterministic_and_names_the_run():
    a = ids.load_id_for("orders_daily_totals", "scheduled__2026-11-20T00:00:00+00:00")
    assert a == ids.load_id_for("orders_daily_totals", "scheduled__2026-11-20T00:00:00+00:00")
    assert a.startswith("orders_daily_totals.scheduled__2026-11-20T00-00-00-00-00.")


def test_runs_that_read_alike_still_get_different_ids():
    assert ids.load_id_for("p", "run:1") != ids.load_id_for("p", "run/1")
    assert ids.load_id_for("p", "r") != ids.load_id_for("q", "r")


def test_ids_fit_postgres_and_kafka_limits():
    load_id = ids.load_id_for("p" * 64, "x" * 500)
    assert len(ids.pg_gid(load_id).encode()) < 200
    assert len(ids.copy_transactional_id(load_id)) < 249
    assert ids.load_id_of_gid(ids.pg_gid(load_id)) == load_id
    assert ids.load_id_of_gid("someone-else") is None


@pytest.mark.parametrize("pipeline", ["", "has space", "semi;colon", "x" * 65])
def test_bad_pipeline_names_are_refused(pipeline):
    with pytest.raises(ValueError, match="pipeline name"):
        ids.load_id_for(pipeline, "run")


def test_empty_run_id_is_refused():
    with pytest.raises(ValueError, match="run id"):
        ids.load_id_for("p", "")


def test_names_of_a_prepare_attempt_are_its_own_and_the_first_keeps_the_old_names():
    load_id = ids.load_id_for("orders_daily_totals", "scheduled__2026-11-20T00:00:00+00:00")
    assert ids.attempt_tag(1) == "" and ids.attempt_tag(2) == "a2"
    assert ids.pg_gid(load_id, "postgres", 1) == ids.pg_gid(load_id) == f"twophase:{load_id}"
    gids = {ids.pg_gid(load_id, name, attempt) for name in ("postgres", "postgres@reporting") for attempt in (1, 2, 3)}
    assert len(gids) == 6 and {ids.load_id_of_gid(g) for g in gids} == {load_id}
    assert all(len(g.encode()) < 200 for g in gids)
    tables = {ids.staging_table(load_id, table, attempt) for table in ("", "t2") for attempt in (1, 2)}
    assert len(tables) == 4 and ids.staging_table(load_id, "", 1) == ids.staging_table(load_id)
    for wrong in (0, -1, "2", None):
        with pytest.raises(ValueError, match="prepare attempt"):
            ids.attempt_tag(wrong)
