"""The bench's memory target on the driver JVM's live heap compares the 90th percentile of
each load's readings, not their peak: a 20M load gives some 140 readings, a 1M load ten,
and the highest of many lands higher in the same band (bench/memory.py)."""

from __future__ import annotations

import pytest

from bench import results as R
from bench import targets
from bench.memory import percentile_90

pytestmark = pytest.mark.serverless
MB = 2**20


def test_the_percentile_of_one_reading_is_that_reading_and_of_many_interpolates():
    assert percentile_90([7]) == 7
    assert percentile_90(list(range(1, 12))) == 10
    assert percentile_90([100, 100, 100, 100, 200]) == 160


def run(rows: int, readings: list[int]) -> R.Run:
    r = R.Run("narrow", rows, 3, 100)
    r.add({R.JDBC_DEFAULT: 1, R.JDBC_TUNED: 1, R.KAFKA_WRITER: 1},
          {"atomic": {"jvm": 800 * MB, "jvm_live": max(readings), "jvm_live_p90": percentile_90(readings)}})
    return r


def live_check(small: list[int], large: list[int]) -> targets.Check:
    [check] = [c for c in targets._memory("narrow", [run(1_000_000, small), run(20_000_000, large)])
               if c.target.startswith("live heap")]
    return check


def test_a_band_read_more_often_passes_and_a_climb_misses():
    band = [100 * MB, 110 * MB, 105 * MB, 120 * MB, 95 * MB, 115 * MB, 100 * MB, 108 * MB, 112 * MB, 103 * MB]
    # The same band read fourteen times as often, with one reading at twice the others.
    often = band * 14 + [240 * MB]
    check = live_check(band, often)
    assert check.ok is True, check
    assert check.cells[20_000_000].endswith("; peak 240 MB)"), check.cells
    # A heap that climbs through the load misses, however it is read.
    climb = [int(100 * MB * (1 + i / 40)) for i in range(140)]
    assert live_check(band, climb).ok is False
