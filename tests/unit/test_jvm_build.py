"""The product's Java classes are built once per source into the machine's cache
(twophase.jvm_build), and the builds no process used for KEEP_DAYS go when a new one is
made. Needs the JDK that Spark needs, no server."""

from __future__ import annotations

import os
import time

import pytest

from twophase import jvm_build

PROBE = "public final class Probe { public static void main(String[] a) { System.out.println(%d); } }"


def test_a_new_build_removes_the_builds_no_one_used_for_keep_days(tmp_path, monkeypatch):
    monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path / "cache"))
    kind = tmp_path / "cache" / "probe"
    stale, recent = kind / "0000000000000000", kind / "1111111111111111"
    for folder in (stale, recent):
        folder.mkdir(parents=True)
        (folder / "Probe.jar").write_bytes(b"an older build")
    old = time.time() - (jvm_build.KEEP_DAYS + 1) * 86400
    os.utime(stale, (old, old))
    source = tmp_path / "Probe.java"
    source.write_text(PROBE % 1)

    built = jvm_build.built("probe", "Probe", [source], "")
    assert (built / "Probe.jar").stat().st_size > 100
    assert not stale.exists() and recent.exists(), "only the build unused for KEEP_DAYS goes"

    os.utime(built, (old, old))  # used again: marked, so the next build keeps it
    assert jvm_build.built("probe", "Probe", [source], "") == built
    assert built.stat().st_mtime > old + 86400


def test_a_source_that_does_not_compile_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "Probe.java"
    source.write_text("public final class Probe { int x = ; }")
    with pytest.raises(jvm_build.JvmUnavailable, match="compiling Probe.java failed: .*illegal start of expression"):
        jvm_build.built("probe", "Probe", [source], "")
    assert not list((tmp_path / "cache" / "probe").glob("*/Probe.jar"))


def test_a_java_source_inside_the_shipped_zip_is_compiled_from_a_copy(tmp_path, monkeypatch):
    """--py-files ships the package as a zip: its Java sources are read from it."""
    import zipfile

    from twophase.spark.java_functions import on_disk

    monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path / "cache"))
    archive = tmp_path / "twophase.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("twophase/spark/jvm/Probe.java", PROBE % 2)
    copy = on_disk(archive / "twophase" / "spark" / "jvm" / "Probe.java")
    assert copy.read_text() == PROBE % 2 and copy.name == "Probe.java" and copy.is_relative_to(tmp_path / "cache")
    assert on_disk(archive / "twophase" / "spark" / "jvm" / "Probe.java") == copy  # one copy per content
    assert (jvm_build.built("probe", "Probe", [copy], "") / "Probe.jar").is_file()
    with pytest.raises(jvm_build.JvmUnavailable, match=r"twophase/spark/jvm/Gone.java is not in .*twophase.zip"):
        on_disk(archive / "twophase" / "spark" / "jvm" / "Gone.java")
    with pytest.raises(jvm_build.JvmUnavailable, match=r"Gone.java is not on the driver's disk"):
        on_disk(tmp_path / "Gone.java")
