"""PostgreSQL from Debian's packages, in clusters of the stack's own.

Two clusters, one implementation (Cluster): the pipeline's in <stack>/postgres (main()),
and the stock one in <stack>/postgres-stock (stock()), configured as PostgreSQL ships, so
it cannot prepare transactions. Each listens on 127.0.0.1 only, on a port of its own, and
keeps its Unix socket in a private folder, so neither meets a system Postgres. Postgres
refuses to run as root: when the stack runs as root, the servers run as the `postgres`
system user that Debian's package creates.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg2

from . import secrets
from .proc import StackError, run, wait_until
from .settings import (BASELINE_DB, ICEBERG_DB, PIPELINE_DB, PIPELINE_ROLE, POSTGRES_SERVER_SETTINGS,
                       POSTGRES_STOCK_SERVER_SETTINGS, REPORTING_DB, STOCK_DB, STOCK_REPORTS_DB, Ports, airflow_db,
                       stack_dir)


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


@dataclass(frozen=True)
class Cluster:
    """A cluster of the stack: its folder <stack>/<folder> holds the data, the Unix socket's
    folder and the server's log; the server listens on 127.0.0.1:port with `settings`, and
    the pipeline's role owns `databases` (the first is the one `answers` logs in to)."""

    name: str  # in messages: "Postgres", "stock Postgres"
    folder: str
    port: int
    settings: dict[str, str]
    databases: tuple[str, ...]

    def link(self) -> Path:
        """<stack>/<folder>: the cluster's folder, or a symlink to it (_make_home)."""
        return stack_dir() / self.folder

    def home(self) -> Path:
        """The cluster's folder (resolved: <stack>/<folder> may be a symlink)."""
        return self.link().resolve()

    def data_dir(self) -> Path:
        return self.home() / "data"

    def socket_dir(self) -> Path:
        return self.home() / "run"

    def logfile(self) -> Path:
        return self.home() / "postgres.log"

    def _make_home(self) -> None:
        """Create <stack>/<folder> where the server user can reach it.

        As root, the server runs as `postgres`, which cannot enter a checkout under a
        private folder (a 0700 home or temp dir). Then the cluster lives under Debian's
        /var/lib/postgresql and <stack>/<folder> is a symlink to it.
        """
        link = self.link()
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

    def init(self, bin_: Path) -> None:
        """Make the cluster's folders, and the cluster with initdb (of bin_) when missing."""
        self._make_home()
        for d in (self.home(), self.socket_dir()):
            d.mkdir(parents=True, exist_ok=True)
            _chown_to_server_user(d)
        os.chmod(self.socket_dir(), 0o700)
        if (self.data_dir() / "PG_VERSION").exists():
            return
        print(f"stack: creating the {self.name} cluster (initdb)", flush=True)
        run(_as_server_user([
            str(bin_ / "initdb"), "-D", str(self.data_dir()), "-U", "postgres", "-E", "UTF8",
            "--locale=C.UTF-8", "--auth-local=trust", "--auth-host=scram-sha-256",
        ]))

    def _write_config(self) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir()}'",
            **self.settings,
        }
        stack_conf = self.data_dir() / "stack.conf"
        stack_conf.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        _chown_to_server_user(stack_conf)
        main_conf = self.data_dir() / "postgresql.conf"
        include = "include = 'stack.conf'\n"
        if include not in main_conf.read_text():
            with open(main_conf, "a") as f:
                f.write(include)

    def is_running(self) -> bool:
        bin_ = bindir()
        if bin_ is None or not (self.data_dir() / "PG_VERSION").exists():
            return False
        proc = subprocess.run(_as_server_user([str(bin_ / "pg_ctl"), "status", "-D", str(self.data_dir())]),
                              capture_output=True)
        return proc.returncode == 0

    def answers(self) -> bool:
        """True when the pipeline role can log in over TCP and run a query."""
        try:
            with psycopg2.connect(dsn(self.port, self.databases[0]), connect_timeout=2) as conn, conn.cursor() as cur:
                cur.execute("select 1")
                return cur.fetchone() == (1,)
        except psycopg2.Error:
            return False

    def _admin(self, sql: str, db: str = "postgres") -> str:
        """Run SQL as the superuser over the private Unix socket."""
        proc = run(_as_server_user([
            "psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", str(self.socket_dir()),
            "-p", str(self.port), "-U", "postgres", "-d", db, "-c", sql,
        ]))
        return proc.stdout.strip()

    def _ensure_role_and_databases(self) -> None:
        password = secrets.load()["pipeline_password"]
        exists = self._admin(f"select 1 from pg_roles where rolname = '{PIPELINE_ROLE}'")
        verb = "alter" if exists else "create"
        self._admin(f"{verb} role {PIPELINE_ROLE} login password '{password}'")
        present = set(self._admin("select datname from pg_database").split())
        for db in self.databases:
            if db not in present:
                self._admin(f"create database {db} owner {PIPELINE_ROLE}")

    def copy_database(self, source: str, target: str) -> None:
        """`target` anew, as a copy of `source` (CREATE DATABASE ... TEMPLATE), owned by the
        pipeline's role. No session may be connected to either meanwhile."""
        self._admin(f"drop database if exists {target}")
        self._admin(f"create database {target} template {source} owner {PIPELINE_ROLE}")

    def up(self, bin_: Path) -> None:
        """Start the server of the cluster that init made, when stopped (pg_ctl of bin_), and
        make the role and databases; wait until the role can log in."""
        self._write_config()
        if not self.is_running():
            print(f"stack: starting {self.name} on 127.0.0.1:{self.port}", flush=True)
            run(_as_server_user([
                str(bin_ / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(self.data_dir()),
                "-l", str(self.logfile()),
            ]))
        wait_until(lambda: subprocess.run(
            ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode == 0,
            60, self.name, self.logfile())
        self._ensure_role_and_databases()
        wait_until(self.answers, 30, f"{self.name} login of the pipeline role", self.logfile())

    def down(self) -> None:
        bin_ = bindir()
        if bin_ and self.is_running():
            print(f"stack: stopping {self.name}", flush=True)
            run(_as_server_user([str(bin_ / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.data_dir())]))

    def admin_dsn(self) -> str:
        """The superuser over the cluster's private Unix socket (local trust: no password), in
        the first of its databases. For tests that create roles and databases
        (tests/core/test_least_privilege.py), never for the pipeline."""
        return f"host={self.socket_dir()} port={self.port} user=postgres dbname={self.databases[0]}"

    def status(self) -> str:
        if not self.is_running():
            return "down"
        where = f"127.0.0.1:{self.port}"
        return f"up, {where}" if self.answers() else f"running but not answering on {where}"

    def destroy(self) -> None:
        """Stop the server and delete the cluster's files (used by `stack reset`)."""
        self.down()
        shutil.rmtree(self.home(), ignore_errors=True)
        self.link().unlink(missing_ok=True)


def main() -> Cluster:
    """The pipeline's cluster: <stack>/postgres on TWOPHASE_PG_PORT, with the pipeline's,
    the second (reporting), the benchmark baseline's, the Iceberg catalog's and Airflow's
    databases."""
    return Cluster("Postgres", "postgres", Ports.from_env().postgres, POSTGRES_SERVER_SETTINGS,
                   (PIPELINE_DB, REPORTING_DB, BASELINE_DB, ICEBERG_DB, airflow_db()))


def stock() -> Cluster:
    """The stock cluster: <stack>/postgres-stock on TWOPHASE_STOCK_PG_PORT, configured as
    PostgreSQL ships (max_prepared_transactions = 0), with its two databases."""
    return Cluster("stock Postgres", "postgres-stock", Ports.from_env().postgres_stock,
                   POSTGRES_STOCK_SERVER_SETTINGS, (STOCK_DB, STOCK_REPORTS_DB))


def up() -> None:
    """Both clusters up, the stock one after the pipeline's. On a fresh stack their initdbs
    run side by side: on two cores, that takes ~1.3 s less than one after the other."""
    bin_ = ensure_installed()
    clusters = main(), stock()
    with ThreadPoolExecutor(len(clusters)) as pool:
        list(pool.map(lambda cluster: cluster.init(bin_), clusters))  # list(): raises what an initdb raised
    for cluster in clusters:
        cluster.up(bin_)


def down() -> None:
    """Stop both servers, the stock one first."""
    stock().down()
    main().down()


def destroy() -> None:
    """Delete both clusters' files (used by `stack reset`)."""
    stock().destroy()
    main().destroy()


def dsn(port: int | None = None, db: str = PIPELINE_DB) -> str:
    port = port or Ports.from_env().postgres
    password = secrets.load()["pipeline_password"]
    return f"postgresql://{PIPELINE_ROLE}:{password}@127.0.0.1:{port}/{db}"
