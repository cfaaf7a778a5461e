"""The executors' Python, checked before anything is staged.

Executors run the participants' writers (participants/<kind>/writer.py) and the staging
pass (spark_stage), which import client libraries: pyarrow for every kind, psycopg2 for
Postgres, confluent_kafka for Kafka. On a cluster the executors run whatever Python the
Spark configuration names (`spark.pyspark.python`), on hosts that share nothing with the
Airflow host. Without this check, a missing library fails deep inside the staging, task
after task, after the job's input was read. With it, prepare fails first, with one line
naming the library, the host and the Python (docs/clusters.md, "Spark clusters").

Each participant class declares what its writers import (`executor_packages`, module
names); the probe is a tiny Spark job with enough partitions to reach every executor
that is up (twice the default parallelism).
"""

from __future__ import annotations

import logging

from ..errors import Terminal

log = logging.getLogger("twophase.executors")

# What the staging pass itself imports on executors (spark_stage), whatever the targets.
STAGING_PACKAGES = ("pyarrow",)
FIX = "install requirements-executor.txt into the executors' Python (docs/clusters.md)"


class ExecutorPackagesMissing(Terminal):
    """An executor's Python cannot import what the load's writers need; nothing was staged."""


def required(participants) -> dict[str, list[str]]:
    """{module: [what needs it]} for the load's participants: the staging, then each kind."""
    needs: dict[str, list[str]] = {name: ["the staging"] for name in STAGING_PACKAGES}
    for p in participants:
        for name in getattr(p, "executor_packages", ()):
            who = f"the {p.kind} participant"
            if who not in needs.setdefault(name, []):
                needs[name].append(who)
    return needs


def probe(modules: list[str]):
    """What runs on the executors: (host, python, {module: why not importable}) per
    partition. A closure (pickled by value), so it needs nothing of twophase there."""

    def each_partition(_rows):
        import importlib
        import socket
        import sys

        missing = {}
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - a broken install is as fatal as a missing one
                missing[name] = "" if isinstance(exc, ModuleNotFoundError) else f"{type(exc).__name__}: {exc}"
        version = ".".join(str(part) for part in sys.version_info[:3])
        yield socket.gethostname(), f"{sys.executable} {version}", missing

    return each_partition


def problem(needs: dict[str, list[str]], findings) -> str | None:
    """The one line naming what executors lack, where, and who needs it; None if nothing."""
    bad = sorted({(host, python, tuple(sorted(missing.items()))) for host, python, missing in findings if missing})
    if not bad:
        return None
    host, python, missing = bad[0]
    lacking = [name for name, why in missing if not why]
    broken = [f"{name} ({why})" for name, why in missing if why]
    parts = []
    if lacking:
        parts.append(f"lack {_and(lacking)}")
    if broken:
        parts.append(f"cannot import {_and(broken)}")
    who = []
    for name, _ in missing:
        who += [w for w in needs.get(name, []) if w not in who]
    others = len({h for h, _, _ in bad} - {host})
    also = f" (and {others} other host{'s' if others > 1 else ''})" if others else ""
    return (f"executors on host {host}{also} (python {python}) {' and '.join(parts)}, needed by {_and(who)}: "
            f"{FIX}")


def check(spark, participants) -> None:
    """Raise ExecutorPackagesMissing unless every executor's Python imports what the
    load's participants need."""
    needs = required(participants)
    sc = spark.sparkContext
    slices = max(2, sc.defaultParallelism * 2)
    findings = sc.parallelize(range(slices), slices).mapPartitions(probe(sorted(needs))).collect()
    trouble = problem(needs, findings)
    if trouble:
        raise ExecutorPackagesMissing(trouble)
    hosts = sorted({(host, python) for host, python, _ in findings})
    log.info("executors' Python imports %s: %s", ", ".join(sorted(needs)),
             "; ".join(f"{host} ({python})" for host, python in hosts))


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
