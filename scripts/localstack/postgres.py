"""PostgreSQL from Debian's packages, in a cluster of the stack's own.

The cluster lives in <stack>/postgres, listens on 127.0.0.1 only, and keeps its Unix
socket in a private folder, so it never meets a system Postgres. Postgres refuses to run
as root: when the stack runs as root, the server runs as the `postgres` system user that
Debian's package creates.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import psycopg2

from . import secrets
from .proc import StackError, run, wait_until
from .settings import (BASELINE_DB, ICEBERG_DB, PIPELINE_DB, PIPELINE_ROLE, POSTGRES_SERVER_SETTINGS,
                       REPORTING_DB, Ports, airflow_db, stack_dir)


def home() -> Path:
    """The cluster's folder, <stack>/postgres (resolved: it may be a symlink, see below)."""
    return (stack_dir() / "postgres").resolve()


def _make_home() -> None:
    """Create <stack>/postgres where the server user can reach it.

    As root, the server runs as `postgres`, which cannot enter a checkout under a private
    folder (a 0700 home or temp dir). Then the cluster lives under Debian's
    /var/lib/postgresql and <stack>/postgres is a symlink to it.
    """
    link = stack_dir() / "postgres"
    if link.exists():
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(_as_server_user(["test", "-x", str(link.parent)])).returncode == 0:
        link.mkdir()
        return
    digest = hashlib.sha256(str(link).encode()).hexdigest()[:12]
    target = Path("/var/lib/postgresql/twophase-stacks") / digest
    target.mkdir(parents=True, exist_ok=True)
    os.chmod(target.parent, 0o755)
    link.symlink_to(target)


def data_dir() -> Path:
    return home() / "data"


def socket_dir() -> Path:
    return home() / "run"


def logfile() -> Path:
    return home() / "postgres.log"


def bindir() -> Path | None:
    """Newest installed PostgreSQL server binaries (Debian layout), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def ensure_installed() -> Path:
    """Install Debian's postgresql with apt when missing, without its default cluster."""
    if bindir() is None:
        if os.geteuid() != 0:
            raise StackError("PostgreSQL is not installed; run as root or `apt-get install postgresql`")
        print("stack: installing PostgreSQL from Debian's packages (apt-get)", flush=True)
        # No main cluster on 5432: the stack makes its own.
        Path("/etc/postgresql-common").mkdir(parents=True, exist_ok=True)
        conf = Path("/etc/postgresql-common/createcluster.conf")
        if not conf.exists():
            conf.write_text("create_main_cluster = false\n")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-q"], env=env)
        run(["apt-get", "install", "-y", "-q", "-o", "Dpkg::Options::=--force-confold", "postgresql"], env=env)
    found = bindir()
    assert found is not None
    return found


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _chown_to_server_user(path: Path) -> None:
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(path, user.pw_uid, user.pw_gid)


def _init_cluster(bin_: Path) -> None:
    _make_home()
    for d in (home(), socket_dir()):
        d.mkdir(parents=True, exist_ok=True)
        _chown_to_server_user(d)
    os.chmod(socket_dir(), 0o700)
    if (data_dir() / "PG_VERSION").exists():
        return
    print("stack: creating the Postgres cluster (initdb)", flush=True)
    run(_as_server_user([
        str(bin_ / "initdb"), "-D", str(data_dir()), "-U", "postgres", "-E", "UTF8",
        "--locale=C.UTF-8", "--auth-local=trust", "--auth-host=scram-sha-256",
    ]))


def _write_config(port: int) -> None:
    settings = {
        "listen_addresses": "'127.0.0.1'",
        "port": str(port),
        "unix_socket_directories": f"'{socket_dir()}'",
        **POSTGRES_SERVER_SETTINGS,
    }
    stack_conf = data_dir() / "stack.conf"
    stack_conf.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    _chown_to_server_user(stack_conf)
    main_conf = data_dir() / "postgresql.conf"
    include = "include = 'stack.conf'\n"
    if include not in main_conf.read_text():
        with open(main_conf, "a") as f:
            f.write(include)


def is_running() -> bool:
    bin_ = bindir()
    if bin_ is None or not (data_dir() / "PG_VERSION").exists():
        return False
    proc = subprocess.run(_as_server_user([str(bin_ / "pg_ctl"), "status", "-D", str(data_dir())]),
                          capture_output=True)
    return proc.returncode == 0


def answers(port: int) -> bool:
    """True when the pipeline role can log in over TCP and run a query."""
    try:
        with psycopg2.connect(dsn(port, PIPELINE_DB), connect_timeout=2) as conn, conn.cursor() as cur:
            cur.execute("select 1")
            return cur.fetchone() == (1,)
    except psycopg2.Error:
        return False


def _admin(sql: str, db: str = "postgres") -> str:
    """Run SQL as the superuser over the private Unix socket."""
    proc = run(_as_server_user([
        "psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", str(socket_dir()),
        "-p", str(Ports.from_env().postgres), "-U", "postgres", "-d", db, "-c", sql,
    ]))
    return proc.stdout.strip()


def _ensure_role_and_databases() -> None:
    password = secrets.load()["pipeline_password"]
    exists = _admin(f"select 1 from pg_roles where rolname = '{PIPELINE_ROLE}'")
    verb = "alter" if exists else "create"
    _admin(f"{verb} role {PIPELINE_ROLE} login password '{password}'")
    for db in (PIPELINE_DB, REPORTING_DB, BASELINE_DB, ICEBERG_DB, airflow_db()):
        if not _admin(f"select 1 from pg_database where datname = '{db}'"):
            _admin(f"create database {db} owner {PIPELINE_ROLE}")


def copy_database(source: str, target: str) -> None:
    """`target` anew, as a copy of `source` (CREATE DATABASE ... TEMPLATE), owned by the
    pipeline's role. No session may be connected to either meanwhile."""
    _admin(f"drop database if exists {target}")
    _admin(f"create database {target} template {source} owner {PIPELINE_ROLE}")


def up() -> None:
    port = Ports.from_env().postgres
    bin_ = ensure_installed()
    _init_cluster(bin_)
    _write_config(port)
    if not is_running():
        print(f"stack: starting Postgres on 127.0.0.1:{port}", flush=True)
        run(_as_server_user([
            str(bin_ / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(data_dir()), "-l", str(logfile()),
        ]))
    wait_until(lambda: subprocess.run(
        ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)]).returncode == 0,
        60, "Postgres", logfile())
    _ensure_role_and_databases()
    wait_until(lambda: answers(port), 30, "Postgres login of the pipeline role", logfile())


def down() -> None:
    bin_ = bindir()
    if bin_ and is_running():
        print("stack: stopping Postgres", flush=True)
        run(_as_server_user([str(bin_ / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(data_dir())]))


def dsn(port: int | None = None, db: str = PIPELINE_DB) -> str:
    port = port or Ports.from_env().postgres
    password = secrets.load()["pipeline_password"]
    return f"postgresql://{PIPELINE_ROLE}:{password}@127.0.0.1:{port}/{db}"


def admin_dsn(port: int | None = None, db: str = PIPELINE_DB) -> str:
    """The superuser over the cluster's private Unix socket (local trust: no password). For
    tests that create roles and databases (tests/core/test_least_privilege.py), never for
    the pipeline."""
    port = port or Ports.from_env().postgres
    return f"host={socket_dir()} port={port} user=postgres dbname={db}"


def status() -> str:
    port = Ports.from_env().postgres
    if not is_running():
        return "down"
    return f"up, 127.0.0.1:{port}" if answers(port) else f"running but not answering on 127.0.0.1:{port}"


def destroy() -> None:
    """Delete the cluster's files (used by `stack reset`)."""
    down()
    shutil.rmtree(home(), ignore_errors=True)
    (stack_dir() / "postgres").unlink(missing_ok=True)
