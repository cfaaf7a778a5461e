"""`airflow dags test` for the tests, from a warm Python: the same command, each run a fresh
process, started without paying Airflow's start again.

Every `airflow dags test` spends about 15 CPU-s on what is the same in every run: importing
Airflow, building the execution API that `dags test` serves to its tasks in-process
(Cadwyn's versioned FastAPI app, whose routes Cadwyn builds at its first request: 5 CPU-s
alone), and importing the libraries the DAG file imports (pyspark, pyiceberg, pyarrow). A
DAG run of the tests costs ~40 CPU-s in all, and the suite runs some forty. So each pytest
worker keeps one server process that has done that once (`serve`) and forks it for each
run: the child sets the run's environment, working directory and output files, runs
Airflow's own `main()` with the run's arguments and exits with its exit code, as the
`airflow` command would. The DAG file, the project's code and the connections are read in
the child, as in a new process (nothing of the project is imported before the fork);
Airflow's ORM disposes its pooled connections in a forked child by itself (settings.py).

What the server read at its start stays: Airflow's configuration (AIRFLOW_HOME, the
AIRFLOW__ variables) and the Python path. A run whose environment differs there gets a
new server. TWOPHASE_TEST_WARM_AIRFLOW=0 runs the plain `airflow` command instead.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

AIRFLOW = Path(sys.executable).parent / "airflow"
# What Airflow reads once, at import: a server serves only runs that agree on these.
_AT_IMPORT = ("AIRFLOW_HOME", "PYTHONPATH", "VIRTUAL_ENV")
# The libraries the DAG files import, imported by the server once (the project's own code is not).
THIRD_PARTY = ("pyspark.sql", "pyiceberg.catalog.sql", "pyiceberg.table", "pyarrow.compute", "pyarrow.fs",
               "pyarrow.parquet", "confluent_kafka.admin", "psycopg2.extras")


@dataclass
class Completed:
    """What subprocess.run(..., capture_output=True, text=True) returns, in short."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def dags_test(args: list[str], env: dict[str, str], cwd: Path, timeout: float) -> Completed:
    """`airflow dags test <args>` with `env` in `cwd`; on timeout the run and every process
    it started are killed and subprocess.TimeoutExpired is raised. DAGs a run registers are
    unpaused (Airflow queues asset events only for a DAG that is not paused: the assets
    tests need the downstream DAG's; airflow_db.clear_queue)."""
    argv, env = ["dags", "test", *args], {**env, "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False"}
    if os.environ.get("TWOPHASE_TEST_WARM_AIRFLOW", "1") == "0":
        proc = subprocess.run([str(AIRFLOW), *argv], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
        return Completed(proc.args, proc.returncode, proc.stdout, proc.stderr)
    return _server(env).run(argv, env, cwd, timeout)


class _Server:
    def __init__(self, env: dict[str, str]):
        self.key = _key(env)
        self.folder = Path(tempfile.mkdtemp(prefix="warm-airflow-"))
        self.proc = subprocess.Popen([sys.executable, __file__, "serve"], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=open(self.folder / "server.log", "w"),
                                     bufsize=0)
        self.pending = b""
        ready = self._answer(timeout=300)
        if ready != {"ready": True}:
            raise RuntimeError(f"the warm airflow server did not start: {ready}; see {self.folder}/server.log")

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> Completed:
        out, err = self.folder / "stdout", self.folder / "stderr"
        self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "cwd": str(cwd), "stdout": str(out),
                                          "stderr": str(err)}).encode() + b"\n")
        child = self._answer(timeout=60)["pid"]
        try:
            returncode = self._answer(timeout=timeout)["returncode"]
        except subprocess.TimeoutExpired:
            os.killpg(child, signal.SIGKILL)  # the run and what it started (spark-submit, ...)
            self._answer(timeout=60)
            raise subprocess.TimeoutExpired([str(AIRFLOW), *argv], timeout,
                                            out.read_text(errors="replace"), err.read_text(errors="replace"))
        return Completed([str(AIRFLOW), *argv], returncode, out.read_text(errors="replace"),
                         err.read_text(errors="replace"))

    def _answer(self, timeout: float) -> dict:
        """The server's next answer (a JSON line), waiting at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise subprocess.TimeoutExpired("warm airflow", timeout)
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"the warm airflow server exited ({self.proc.wait()}); see "
                                   f"{self.folder}/server.log")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


_current: _Server | None = None


def _key(env: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k in _AT_IMPORT or k.startswith("AIRFLOW__")))


def _server(env: dict[str, str]) -> _Server:
    global _current
    if _current is not None and (_current.key != _key(env) or _current.proc.poll() is not None):
        if _current.proc.poll() is None:
            _current.stop()
        _current = None
    if _current is None:
        _current = _Server(env)
    return _current


# The server side -------------------------------------------------------------------------


def _serve() -> None:
    """Read one run per line on stdin, fork a child for it, answer its pid, then its exit
    code. Answers go to the original stdout; Airflow's own output goes to stderr."""
    requests, answers = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)

    from airflow import configuration  # noqa: F401 (first, as airflow/__main__.py does)
    from airflow.__main__ import main
    from airflow.cli.commands import dag_command  # noqa: F401 (what `dags test` runs)
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    # Built once here, used by every child: the in-process API server is cached, its app and
    # the app's versioned routes too (its transport, a thread and an event loop, is made in
    # the child on first use).
    in_process_api_server().app._cadwyn_initialize()
    for library in THIRD_PARTY:
        importlib.import_module(library)
    answers.write(json.dumps({"ready": True}) + "\n")
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            answers.close()
            _child(main, request)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")


def _child(main, request: dict) -> None:
    """Become `airflow <argv>` run with the request's environment, folder and output; never
    returns."""
    code = 1
    try:
        os.setpgid(0, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [str(AIRFLOW), *request["argv"]]
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit
            import logging

            atexit._run_exitfuncs()  # what the interpreter's exit runs
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    sys.path[0] = str(AIRFLOW.parent)  # as the `airflow` script's, not this folder of tests
    _serve()
