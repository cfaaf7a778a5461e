"""What the figures were measured on: CPU, memory, load, and the servers' versions."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from contextlib import closing

import psycopg2

from .data import ROOT
from .limits import KAFKA_LIBS


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float:
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def _java() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True)
    first = (done.stderr or done.stdout).splitlines()[0] if (done.stderr or done.stdout) else "unknown"
    return first.strip()


def _collectors(spark) -> str:
    """The driver JVM's garbage collectors, as it names them (serial: Copy, MarkSweepCompact)."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    return ", ".join(bean.getName() for bean in beans)


def _kafka_version() -> str:
    for jar in KAFKA_LIBS.glob("kafka-clients-*.jar"):
        return re.sub(r"^kafka-clients-|\.jar$", "", jar.name)
    return "unknown"


def _git_commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe_host() -> str:
    """One line: CPUs, memory, OS."""
    return f"{os.cpu_count()} × {_cpu_model()}, {_ram_gib():.1f} GiB, {platform.system()} {platform.release()}"


def describe(spark, dsn: str) -> dict:
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute("show server_version")
        postgres = cur.fetchone()[0]
        cur.execute("select current_setting('shared_buffers'), current_setting('synchronous_commit')")
        shared_buffers, sync_commit = cur.fetchone()
    import pyarrow
    import confluent_kafka

    return {
        "cpu": f"{os.cpu_count()} × {_cpu_model()}",
        "ram": f"{_ram_gib():.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "postgres": f"PostgreSQL {postgres} (shared_buffers {shared_buffers}, synchronous_commit {sync_commit})",
        "kafka": f"Apache Kafka {_kafka_version()} (one KRaft node)",
        "spark": f"Spark {spark.version} ({spark.sparkContext.master}, driver memory "
                 f"{spark.conf.get('spark.driver.memory', '1g')}, collectors {_collectors(spark)})",
        "java": _java(),
        "python": f"Python {platform.python_version()}, pyarrow {pyarrow.__version__}, "
                  f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})",
        "commit": _git_commit(),
    }
