"""scripts/stack on a second, throwaway stack: up twice is harmless, down leaves nothing.

Uses its own folders and ports, so the stack (and the cluster) the other tests use keeps running.
"""

import os
import re
import subprocess
from contextlib import closing
from pathlib import Path

import psycopg2
import pytest

ROOT = Path(__file__).parents[2]


def _stack(env, *args):
    return subprocess.run([str(ROOT / "scripts" / "stack"), *args], env=env,
                          capture_output=True, text=True, timeout=600)


def _alembic_version(dsn: str, db: str) -> str | None:
    with closing(psycopg2.connect(dsn.rsplit("/", 1)[0] + f"/{db}")) as conn, conn.cursor() as cur:
        cur.execute("select version_num from alembic_version")
        return cur.fetchone()[0]


def _processes_using(folder: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(folder) in cmdline:
                found.append(f"{proc.name}: {cmdline[:120]}")
    return found


@pytest.mark.slow
def test_up_twice_status_down(tmp_path):
    folder = tmp_path / "stack"
    env = {**os.environ, "TWOPHASE_STACK_DIR": str(folder), "TWOPHASE_CLUSTER_DIR": str(tmp_path / "cluster"),
           "TWOPHASE_PG_PORT": "16432", "TWOPHASE_STOCK_PG_PORT": "16433", "TWOPHASE_KAFKA_PORT": "19292",
           "TWOPHASE_KAFKA_CONTROLLER_PORT": "19293"}
    try:
        first = _stack(env, "up")
        assert first.returncode == 0, first.stdout + first.stderr
        second = _stack(env, "up")
        assert second.returncode == 0, second.stdout + second.stderr
        assert "starting" not in second.stdout, f"second up restarted something:\n{second.stdout}"

        status = _stack(env, "status")
        assert status.returncode == 0, status.stdout
        assert "postgres  up, 127.0.0.1:16432" in status.stdout
        assert "postgres stock  up, 127.0.0.1:16433" in status.stdout
        assert "kafka     up, 127.0.0.1:19292" in status.stdout

        exports = _stack(env, "env").stdout
        for name in ("TWOPHASE_PG_DSN", "TWOPHASE_KAFKA_BOOTSTRAP", "AIRFLOW_HOME", "AIRFLOW_CONN_TWOPHASE_STOCK",
                     "AIRFLOW_CONN_TWOPHASE_STOCK_REPORTS"):
            assert f"export {name}=" in exports
        assert "127.0.0.1:16432" in exports and "127.0.0.1:19292" in exports
        # The stock server's two databases, where the pipeline's role logs in and cannot prepare.
        stock = {"TWOPHASE_STOCK_DSN": "twophase_stock", "TWOPHASE_STOCK_REPORTS_DSN": "twophase_stock_reports"}
        for name, db in stock.items():
            stock_dsn = re.search(rf"export {name}=(\S+)", exports).group(1).strip("'")
            assert stock_dsn.endswith(f"@127.0.0.1:16433/{db}"), f"{name} is not {db} of the stock server"
            with closing(psycopg2.connect(stock_dsn)) as conn, conn.cursor() as cur:
                cur.execute("show max_prepared_transactions")
                assert cur.fetchone() == ("0",)

        # A second metadata database (as the tests' Airflow has) is a copy of the migrated one.
        copy = _stack({**env, "TWOPHASE_AIRFLOW_DB": "airflow_copy"}, "up")
        assert copy.returncode == 0 and "airflow_copy: a copy of airflow_migrated" in copy.stdout, copy.stdout
        assert "migrating" not in copy.stdout
        dsn = re.search(r"export TWOPHASE_PG_DSN=(\S+)", exports).group(1).strip("'")
        assert _alembic_version(dsn, "airflow_copy") == _alembic_version(dsn, "airflow") is not None
    finally:
        down = _stack(env, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert _processes_using(folder) == []
    after = _stack(env, "status")
    assert after.returncode != 0 and "postgres  down" in after.stdout and "kafka     down" in after.stdout
    assert "postgres stock  down" in after.stdout
    # Run as root, the clusters' files are outside tmp_path (under /var/lib/postgresql: postgres.py).
    assert _stack(env, "reset").returncode == 0
