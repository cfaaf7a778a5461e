"""A job's own Java functions (twophase.spark.java_functions): registered from a source
beside the job and run by the executors; where that cannot be, the job is told why, once,
and goes on its way without them."""

from __future__ import annotations

import logging

from twophase.spark.java_functions import register

DOUBLED = """
package probe;

public final class Doubled implements org.apache.spark.sql.api.java.UDF1<Long, Long> {
    @Override
    public Long call(Long value) {
        return value == null ? null : value * 2;
    }
}
"""


def test_a_java_function_is_compiled_once_and_runs_on_the_executors(spark, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "Doubled.java"
    source.write_text(DOUBLED)
    with caplog.at_level(logging.INFO, logger="twophase.spark.java"):
        assert register(spark, source, {"probe_doubled": ("probe.Doubled", "long")}, instead="unused")
        assert register(spark, source, {"probe_doubled": ("probe.Doubled", "long")}, instead="unused")
    assert caplog.text.count("Java functions probe_doubled registered from") == 1, caplog.text
    assert len(list((tmp_path / "cache" / "spark-functions").glob("*/Doubled.jar"))) == 1
    rows = spark.range(0, 1000, numPartitions=4).selectExpr("sum(probe_doubled(id)) as total").first()
    assert rows["total"] == 2 * sum(range(1000))


def test_a_source_that_does_not_compile_is_named_once_and_the_job_goes_on(spark, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "Broken.java"
    source.write_text("package probe; public final class Broken { int x = ; }")
    with caplog.at_level(logging.WARNING, logger="twophase.spark.java"):
        assert not register(spark, source, {"probe_broken": ("probe.Broken", "long")}, instead="done in SQL instead")
        assert not register(spark, source, {"probe_broken": ("probe.Broken", "long")}, instead="done in SQL instead")
    [said] = [r.getMessage() for r in caplog.records]
    assert "Java functions probe_broken: compiling Broken.java failed" in said and "illegal start of expression" in said
    assert said.endswith("; done in SQL instead")
    assert not spark.catalog.functionExists("probe_broken")


def test_a_source_missing_on_the_driver_is_named(spark, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="twophase.spark.java"):
        assert not register(spark, tmp_path / "Gone.java", {"probe_gone": ("probe.Gone", "long")}, instead="so")
    assert f"{tmp_path / 'Gone.java'} is not on the driver's disk; so" in caplog.text
