"""Spark's Kafka connector (a job reads a Kafka source with it: twophase/spark/sources.py)
and Postgres' JDBC driver (the bench's peers), from Maven Central.

Maven fetches what spark-jars-pom.xml names, for the installed pyspark's Spark and Scala
versions, once per machine (settings.machine_cache(), so a fresh clone finds them; ~/.m2
caches them too), like the stack fetches the Kafka broker (kafka.py). Spark gets them with
spark.jars (the stack's Spark connection, TWOPHASE_SPARK_JARS for sessions started in a
process), minus those pyspark already ships (scala-library, lz4, snappy, hadoop-client...),
so no class is on the classpath twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from .proc import StackError
from .settings import machine_cache

POM = Path(__file__).with_name("spark-jars-pom.xml")
CENTRAL = "https://repo.maven.apache.org/maven2"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_{scala}"


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def spark_versions() -> tuple[str, str]:
    """(Spark version, Scala binary version) of the installed pyspark."""
    import pyspark

    scala = next(pyspark_jars().glob("scala-library-*.jar")).name
    major_minor = re.match(r"scala-library-(\d+\.\d+)\.", scala).group(1)
    return pyspark.__version__, major_minor


def artifact(jar: Path) -> str:
    """'kafka-clients' for kafka-clients-3.9.1.jar, 'spark-tags_2.13' for spark-tags_2.13-4.1.3.jar."""
    return re.match(r"(.+?)-\d", jar.name).group(1)


def ensure() -> list[str]:
    """Paths of the jars to add to Spark (fetched with mvn when missing; one fetcher at a
    time, others wait for it)."""
    spark, scala = spark_versions()
    key = hashlib.sha256(POM.read_bytes() + f"{spark} {scala}".encode()).hexdigest()[:16]
    folder = machine_cache() / "spark-jars" / key
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".done").exists():
            _fetch(folder, spark, scala)
            (folder / ".done").write_text("")
    shipped = {artifact(j) for j in pyspark_jars().glob("*.jar")}
    return [str(j) for j in sorted(folder.glob("*.jar")) if artifact(j) not in shipped]


def kafka_client_classpath(jars: list[str]) -> str:
    """The classpath of the JVM commit copy (TWOPHASE_KAFKA_COPY_CLASSPATH): the Kafka client
    the connector brought, and what it loads that pyspark ships (compression, logging API)."""
    client = [j for j in jars if artifact(Path(j)) == "kafka-clients"]
    shipped = [str(j) for j in sorted(pyspark_jars().glob("*.jar"))
               if artifact(j) in ("lz4-java", "snappy-java", "zstd-jni", "slf4j-api")]
    return os.pathsep.join(client + shipped)


def _fetch(folder: Path, spark: str, scala: str) -> None:
    if shutil.which("mvn") is None:
        raise StackError("Maven (mvn) is needed to fetch Spark's Kafka connector and the JDBC driver: "
                         "apt-get install maven")
    print(f"stack: fetching Spark's Kafka connector {spark} (Scala {scala}) and the JDBC driver with Maven",
          file=sys.stderr, flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    token = spark
    for attempt in (1, 2):
        done = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={folder}",
             "-DincludeScope=runtime", f"-Dspark.version={spark}", f"-Dscala.binary={scala}",
             f"-Dtoken.provider.version={token}"], capture_output=True, text=True)
        if done.returncode == 0:
            return
        missing = TOKEN_PROVIDER.format(scala=scala) in done.stdout + done.stderr
        if attempt == 2 or not missing:
            raise StackError(f"mvn failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
        # Some mirrors of Central lack this small module at the newest versions; the
        # newest release of the same major version serves a plaintext broker alike.
        token = _newest_release(TOKEN_PROVIDER.format(scala=scala), spark)
        print(f"stack: {TOKEN_PROVIDER.format(scala=scala)}:{spark} is not on Maven Central here; "
              f"using {token}", file=sys.stderr, flush=True)


def _newest_release(name: str, at_most: str) -> str:
    url = f"{CENTRAL}/org/apache/spark/{name}/maven-metadata.xml"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    key = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    releases = [v for v in re.findall(r"<version>([\d.]+)</version>", text)
                if v.split(".")[0] == at_most.split(".")[0] and key(v) <= key(at_most)]
    if not releases:
        raise StackError(f"no release of {name} up to {at_most} on {CENTRAL}")
    return max(releases, key=key)
