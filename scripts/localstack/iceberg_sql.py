"""`scripts/stack iceberg-sql [spark-sql arguments]`: Spark SQL on the stack's Iceberg tables.

An independent reader of what the Iceberg participant commits: Spark with Iceberg's own
Java runtime, through Iceberg's JDBC catalog on the same database the pipeline's pyiceberg
SQL catalog writes (`twophase_iceberg`), as catalog `twophase`:

    scripts/stack iceberg-sql -e "select day, count(*) from twophase.analytics.customer_daily_totals group by day"

Maven fetches the jars of iceberg-sql-pom.xml once into <stack>/iceberg/jars. The catalog's
password goes into a properties file readable by its owner only (<stack>/iceberg/
spark-sql.conf), never onto the command line.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from . import secrets
from .proc import StackError, run
from .settings import ICEBERG_CATALOG_NAME, ICEBERG_DB, PIPELINE_ROLE, Ports, stack_dir, venv_bin

POM = Path(__file__).with_name("iceberg-sql-pom.xml")


def home() -> Path:
    return stack_dir() / "iceberg"


def jars() -> list[Path]:
    """The runtime and driver jars, fetched with Maven when missing or when the pom changed."""
    target = home() / "jars"
    stamp = target / ".pom.sha256"
    want = hashlib.sha256(POM.read_bytes()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == want):
        if shutil.which("mvn") is None:
            raise StackError("Maven (mvn) is needed to fetch Iceberg's Spark runtime; `apt-get install maven`")
        print("stack: fetching Iceberg's Spark runtime from Maven Central (first time: ~1 min)", file=sys.stderr,
              flush=True)
        shutil.rmtree(target, ignore_errors=True)
        run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={target}",
             "-DincludeScope=runtime", "-DexcludeTransitive=true"])
        stamp.write_text(want)
    return sorted(target.glob("*.jar"))


def properties_file() -> Path:
    """Spark's settings for catalog `twophase` (with the password: mode 600)."""
    catalog = f"spark.sql.catalog.{ICEBERG_CATALOG_NAME}"
    settings = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        catalog: "org.apache.iceberg.spark.SparkCatalog",
        f"{catalog}.type": "jdbc",
        f"{catalog}.uri": f"jdbc:postgresql://127.0.0.1:{Ports.from_env().postgres}/{ICEBERG_DB}",
        f"{catalog}.jdbc.user": PIPELINE_ROLE,
        f"{catalog}.jdbc.password": secrets.load()["pipeline_password"],
        f"{catalog}.warehouse": (home() / "warehouse").as_uri(),
        "spark.ui.enabled": "false",
    }
    path = home() / "spark-sql.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.writelines(f"{key} {value}\n" for key, value in settings.items())
    return path


def command(args: list[str]) -> list[str]:
    spark_sql = venv_bin().parent / "lib"
    found = sorted(spark_sql.glob("python3*/site-packages/pyspark/bin/spark-sql"))
    if not found:
        raise StackError("spark-sql not found in the virtualenv's pyspark (scripts/install)")
    return [str(found[0]), "--properties-file", str(properties_file()),
            "--jars", ",".join(str(j) for j in jars()), *args]
