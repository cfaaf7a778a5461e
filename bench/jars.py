"""The peers' jars (Postgres' JDBC driver, Spark's Kafka connector): the stack's, fetched
once per machine by scripts/localstack/spark_jars.py."""

from __future__ import annotations

import os

from .data import ROOT


def ensure() -> list[str]:
    """Paths of the jars to add to Spark: TWOPHASE_SPARK_JARS (scripts/stack env), else
    fetched by the stack's own code."""
    listed = os.environ.get("TWOPHASE_SPARK_JARS")
    if listed:
        return listed.split(",")
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from localstack import spark_jars
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return spark_jars.ensure()
