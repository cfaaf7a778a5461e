"""A throwaway PostgreSQL cluster of the stack's binaries, for tests that must change its
settings or restart it (clean or crash) without touching the stack's own server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Throwaway:
    """A running cluster: `dsn`, and restart() as a clean shutdown or a crash."""

    def __init__(self, settings: str):
        sys.path.insert(0, str(ROOT / "scripts"))
        try:
            from localstack.postgres import _as_server_user, _chown_to_server_user, bindir
        finally:
            sys.path.remove(str(ROOT / "scripts"))
        self._as_server_user = _as_server_user
        self.bin = bindir()
        assert self.bin is not None, "PostgreSQL server binaries not found under /usr/lib/postgresql"
        # Run as root, the server runs as `postgres`, which must own (and reach) its folder.
        self.home = Path(tempfile.mkdtemp(prefix="twophase-throwaway-",
                                          dir="/var/lib/postgresql" if os.geteuid() == 0 else None))
        _chown_to_server_user(self.home)
        self.data, port = self.home / "data", _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._run("initdb", "-D", self.data, "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8", "--auth=trust")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{self.home}'\n"
                       f"{settings}\n")
        self.start()

    def _run(self, tool: str, *args) -> None:
        cmd = self._as_server_user([str(self.bin / tool), *map(str, args)])
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{tool} failed:\n{proc.stdout}{proc.stderr}"

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", self.data, "-l", self.home / "postgres.log")

    def restart(self, crash: bool) -> None:
        """Stop cleanly (a shutdown checkpoint: unlogged tables keep their rows) or as a
        crash (`immediate`: crash recovery at start empties every unlogged table), then start."""
        self._run("pg_ctl", "stop", "-w", "-m", "immediate" if crash else "fast", "-D", self.data)
        self.start()

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "stop", "-w", "-m", "immediate", "-D", self.data)
        shutil.rmtree(self.home, ignore_errors=True)


@contextmanager
def throwaway_postgres(settings: str = "") -> Iterator[Throwaway]:
    """A fresh cluster with `settings` added to postgresql.conf; stopped and deleted after."""
    server = None
    try:
        server = Throwaway(f"fsync = off\n{settings}")
        yield server
    finally:
        if server is not None:
            server.remove()
