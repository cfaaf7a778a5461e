"""The peers' jars: Postgres' JDBC driver and Spark's Kafka connector, from Maven Central.

Maven fetches what jars-pom.xml names, for the installed pyspark's Spark and Scala
versions, into .stack/bench/jars (once; ~/.m2 caches them too), like the stack fetches
the Kafka broker (scripts/localstack/kafka.py). Spark gets them with spark.jars, minus
those pyspark already ships (scala-library, lz4, snappy, hadoop-client...), so no class
is on the classpath twice.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

from .data import ROOT

POM = Path(__file__).with_name("jars-pom.xml")
JAR_DIR = ROOT / ".stack" / "bench" / "jars"
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
    """Paths of the jars to add to Spark (fetched with mvn when missing or stale)."""
    spark, scala = spark_versions()
    stamp = JAR_DIR / ".stamp"
    want = hashlib.sha256(POM.read_bytes() + f"{spark} {scala}".encode()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == want):
        _fetch(spark, scala)
        stamp.write_text(want)
    shipped = {artifact(j) for j in pyspark_jars().glob("*.jar")}
    return [str(j) for j in sorted(JAR_DIR.glob("*.jar")) if artifact(j) not in shipped]


def _fetch(spark: str, scala: str) -> None:
    if shutil.which("mvn") is None:
        raise SystemExit("bench: Maven (mvn) is needed to fetch the JDBC driver and spark-sql-kafka: "
                         "apt-get install maven")
    print(f"bench: fetching the JDBC driver and spark-sql-kafka {spark} (Scala {scala}) with Maven", flush=True)
    shutil.rmtree(JAR_DIR, ignore_errors=True)
    token = spark
    for attempt in (1, 2):
        done = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={JAR_DIR}",
             "-DincludeScope=runtime", f"-Dspark.version={spark}", f"-Dscala.binary={scala}",
             f"-Dtoken.provider.version={token}"], capture_output=True, text=True)
        if done.returncode == 0:
            return
        missing = TOKEN_PROVIDER.format(scala=scala) in done.stdout + done.stderr
        if attempt == 2 or not missing:
            raise SystemExit(f"bench: mvn failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
        # Some mirrors of Central lack this small module at the newest versions; the
        # newest release of the same major version serves a plaintext broker alike.
        token = _newest_release(TOKEN_PROVIDER.format(scala=scala), spark)
        print(f"bench: {TOKEN_PROVIDER.format(scala=scala)}:{spark} is not on Maven Central here; "
              f"using {token}", flush=True)


def _newest_release(name: str, at_most: str) -> str:
    url = f"{CENTRAL}/org/apache/spark/{name}/maven-metadata.xml"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    key = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    releases = [v for v in re.findall(r"<version>([\d.]+)</version>", text)
                if v.split(".")[0] == at_most.split(".")[0] and key(v) <= key(at_most)]
    if not releases:
        raise SystemExit(f"bench: no release of {name} up to {at_most} on {CENTRAL}")
    return max(releases, key=key)
