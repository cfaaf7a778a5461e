"""A job's own Java functions in its Spark SQL, from a Java source shipped beside the job.

A rule applied to every line costs a fraction in Java of what a regular expression or
Python costs (the example's fast path: 0.4 s per million lines, against 2.0-2.4 s for its
regular expression; spark_jobs/jvm/OrderLines.java):

    from twophase.spark.java_functions import register

    if register(spark, Path(__file__).with_name("jvm") / "MyRule.java",
                {"my_rule": ("com.example.MyRule", "struct<ok boolean, value long>")},
                instead="the rule runs as a regular expression"):
        rule = F.call_function("my_rule", F.col("value"))
    else:
        rule = ...  # the same work without Java

The source is compiled (twophase.jvm_build: once per source and Spark installation, into
the machine's cache) against the session's driver classpath and its spark.jars, its jar added
to the session (ADD JAR: the driver loads it, the executors fetch it from the driver),
and each class (one of Spark's org.apache.spark.sql.api.java.UDF1..UDF22) registered as a
SQL function. A source inside a zip on the driver's disk (the twophase package, shipped
with --py-files, carries the readers' LineFields.java) is compiled from a copy in the
cache. Where that cannot happen (no JDK beside the driver, a source that does not compile,
a driver that does not have the source: a job's own folder in cluster deploy mode)
`register` logs why, once per session, and the job does the same work without it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import weakref
import zipfile
from pathlib import Path

from ..errors import root_cause
from ..jvm_build import JvmUnavailable, built, cache_dir

log = logging.getLogger("twophase.spark.java")
_refused: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> {sources it could not register}


def register(spark, source: Path, functions: dict[str, tuple[str, str]], instead: str) -> bool:
    """Whether every function of `functions` ({SQL name: (class name, return type as a DDL
    string)}) is registered in `spark`'s session, compiled from `source` the first time.
    When it cannot be, a warning says why and what the job does `instead`, once: asked
    again in the same session, the answer is the same, without a second try."""
    if source in _refused.get(spark, ()):
        return False
    if all(spark.catalog.functionExists(name) for name in functions):
        return True
    try:
        jar = add_jar(spark, "spark-functions", source.stem, [source])
        for name, (class_name, returns) in functions.items():
            spark.udf.registerJavaFunction(name, class_name, returns)
    except Exception as exc:  # noqa: BLE001 - any failure leaves the job its way without Java
        _refused.setdefault(spark, set()).add(source)
        log.warning("Java functions %s: %s; %s", ", ".join(functions),
                    exc if isinstance(exc, JvmUnavailable) else root_cause(exc), instead)
        return False
    log.info("Java functions %s registered from %s", ", ".join(functions), jar)
    return True


def add_jar(spark, kind: str, name: str, sources: list[Path]) -> Path:
    """The jar `name`.jar of `sources` (each on_disk), compiled (twophase.jvm_build, cached
    as `kind`) against the driver's classpath and the local jars of `spark.jars`, and added
    to the session (ADD JAR: the executors fetch it from the driver); its path."""
    jvm = spark.sparkContext._jvm
    jars = [j.removeprefix("file://").removeprefix("file:")
            for j in spark.sparkContext.getConf().get("spark.jars", "").split(",") if j]
    classpath = os.pathsep.join([jvm.System.getProperty("java.class.path"), *(j for j in jars if os.path.isfile(j))])
    jar = built(kind, name, [on_disk(source) for source in sources], classpath) / f"{name}.jar"
    spark.sql(f"ADD JAR '{jar}'")
    return jar


def on_disk(source: Path) -> Path:
    """`source` as a file javac can read: itself, or, when it is inside a zip on the
    driver's disk (the package shipped with --py-files), a copy of it in the machine's
    cache (one per content)."""
    if source.is_file():
        return source
    archive = next((p for p in source.parents if p.suffix == ".zip" and p.is_file()), None)
    if archive is None:
        raise JvmUnavailable(f"{source} is not on the driver's disk")
    try:
        with zipfile.ZipFile(archive) as zipped:
            text = zipped.read(source.relative_to(archive).as_posix())
    except KeyError:
        raise JvmUnavailable(f"{source.relative_to(archive)} is not in {archive}") from None
    copy = cache_dir() / "sources" / hashlib.sha256(text).hexdigest()[:16] / source.name
    if not copy.is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        partial = copy.with_name(f"{copy.name}.{os.getpid()}.partial")  # one per process: javac reads whole files
        partial.write_bytes(text)
        partial.replace(copy)
    return copy
