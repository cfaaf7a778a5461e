"""scripts/stack up|down|status|env|reset|...: the local stack's command line (USAGE)."""

from __future__ import annotations

import os
import shlex
import sys

from . import airflow, airflow_services, browser, cluster, iceberg_sql, kafka, postgres, spark_home, spark_jars
from .proc import StackError
from .settings import venv_bin

USAGE = """usage: scripts/stack up|down|status|env|reset|airflow-up|airflow-down|login|browser|spark-home|iceberg-sql|cluster
  up      start Postgres (the pipeline's server, then the stock one) and Kafka, migrate Airflow's DB;
          idempotent, waits until each answers
  airflow-up    also start Airflow's UI: api-server, scheduler, dag-processor, triggerer
  airflow-down  stop only those
  login   print the UI's address and local login
  browser install the UI tests' browser (Debian's chromium) when missing
  spark-home  make the tests' Spark home when missing (~40 s, once: spark_home.py); print
          the export lines that select it: eval "$(scripts/stack spark-home)"
  down    stop what the stack started (Airflow's components and the cluster too)
  status  say what is up and where
  env     print export lines: eval "$(scripts/stack env)" (the cluster's too when it is up)
  reset   stop and delete the stack's data, the cluster's too (keeps downloaded jars)
  cluster up|down|status|env|reset  the stack as a cluster: Spark standalone, three Kafka brokers
  iceberg-sql [spark-sql arguments]  Spark SQL on the stack's Iceberg tables (catalog `twophase`)"""


def shell_environment() -> dict[str, str]:
    env = airflow.environment()
    env["PATH"] = f"{venv_bin()}:{os.environ.get('PATH', '')}"
    env["TWOPHASE_AIRFLOW_URL"] = airflow_services.url()
    # For a shell and the tests only, not in Airflow's environment: the server's superuser.
    env["TWOPHASE_PG_ADMIN_DSN"] = postgres.main().admin_dsn()
    if cluster.is_running():
        env.update(cluster.environment())
    return env


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else ""
    if cmd == "up":
        postgres.up()
        kafka.up()
        spark_jars.ensure()
        airflow.up({**os.environ, **shell_environment()})
        print(status_text())
    elif cmd == "airflow-up":
        main(["up"])
        airflow_services.up({**os.environ, **shell_environment()})
        print(f"airflow   UI at {airflow_services.login()}")
    elif cmd == "airflow-down":
        airflow_services.down()
    elif cmd == "browser":
        print(f"browser   {browser.ensure_installed()}")
    elif cmd == "spark-home":
        print(spark_home.export_lines())
    elif cmd == "login":
        print(airflow_services.login())
    elif cmd == "cluster":
        return cluster_main(argv[1:])
    elif cmd == "down":
        cluster.down()
        airflow_services.down()
        kafka.down()
        postgres.down()
    elif cmd == "status":
        print(status_text())
        statuses = (postgres.main().status(), postgres.stock().status(), kafka.status())
        return 0 if all(s.startswith("up") for s in statuses) else 3
    elif cmd == "env":
        for key, value in shell_environment().items():
            print(f"export {key}={shlex.quote(value)}")
    elif cmd == "iceberg-sql":
        cmd_line = iceberg_sql.command(argv[1:])
        os.execvpe(cmd_line[0], cmd_line, {**os.environ, **shell_environment()})
    elif cmd == "reset":
        cluster.reset()
        kafka.destroy()
        postgres.destroy()
        for stamp in airflow.home().glob(".migrated-*"):
            stamp.unlink()
    else:
        print(USAGE, file=sys.stderr)
        return 2
    return 0


def cluster_main(argv: list[str]) -> int:
    cmd = argv[0] if argv else ""
    if cmd == "up":
        cluster.up()
        print(cluster.status_text())
    elif cmd == "down":
        cluster.down()
    elif cmd == "status":
        print(cluster.status_text())
        return 0 if cluster.is_up() else 3
    elif cmd == "env":
        for key, value in cluster.environment().items():
            print(f"export {key}={shlex.quote(value)}")
    elif cmd == "reset":
        cluster.reset()
    else:
        print(cluster.USAGE, file=sys.stderr)
        return 2
    return 0


def status_text() -> str:
    return "\n".join([
        f"postgres  {postgres.main().status()}",
        f"postgres stock  {postgres.stock().status()}",
        f"kafka     {kafka.status()}",
        f"airflow   {airflow.status()}",
        f"airflow   {airflow_services.status()}",
        cluster.status_text(),
    ])


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except StackError as exc:
        print(f"stack: error: {exc}", file=sys.stderr)
        sys.exit(1)
