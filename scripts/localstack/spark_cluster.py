"""A Spark standalone cluster: one master and ONE worker that cannot see the checkout.

Both run from the executors' virtualenv (executor_python.py), not from the checkout's
.venv, with an environment made from scratch (no PYTHONPATH, VIRTUAL_ENV or PYSPARK_PYTHON
of the checkout). The worker runs in its own mount namespace in which the checkout (and the
checkout its .venv lives in) is an empty tmpfs:

    unshare --mount --propagation private sh -c 'mount -t tmpfs ... <checkout>; exec spark-class ...'

so its executors really cannot read the checkout. Its working folder, logs and pid files are
in the cluster folder (settings.cluster_dir()).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import urllib.request
from pathlib import Path

from . import executor_python
from .proc import StackError, port_open, running_pid, start_detached, stop_pid, wait_until
from .settings import (ROOT, SPARK_DAEMON_MEMORY, SPARK_WORKER_CORES, SPARK_WORKER_MEMORY, ClusterPorts,
                       cluster_dir, venv_bin)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def home() -> Path:
    return cluster_dir() / "spark"


def master_url() -> str:
    return f"spark://127.0.0.1:{ClusterPorts.from_env().spark_master}"


def master_pidfile() -> Path:
    return home() / "master.pid"


def worker_pidfile() -> Path:
    return home() / "worker.pid"


def master_log() -> Path:
    return home() / "master.log"


def worker_log() -> Path:
    return home() / "worker.log"


def worker_dir() -> Path:
    """The worker's working folder: each application's executors run in a folder below."""
    return home() / "work"


def _hidden_file() -> Path:
    return home() / "worker-hidden-paths"


def checkouts_to_hide() -> list[Path]:
    """This checkout, and the one its .venv belongs to when .venv is a link to another."""
    paths = [ROOT]
    venv_checkout = venv_bin().resolve().parents[1]
    if venv_checkout != ROOT and not venv_checkout.is_relative_to(ROOT):
        paths.append(venv_checkout)
    return paths


def check_cluster_dir() -> None:
    """The worker's folder must be outside what it cannot see."""
    inside = [p for p in checkouts_to_hide() if cluster_dir().is_relative_to(p)]
    if inside:
        raise StackError(f"TWOPHASE_CLUSTER_DIR={cluster_dir()} is inside the checkout {inside[0]}, "
                         "which the Spark worker must not see; choose a folder outside it")


def _environment() -> dict[str, str]:
    """The daemons' whole environment: nothing of the caller's shell or of the checkout."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home() / "home"),
        "LANG": "C.UTF-8",
        "SPARK_HOME": str(executor_python.spark_home()),
        "SPARK_CONF_DIR": str(home() / "conf"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": SPARK_DAEMON_MEMORY,
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


def _spark_class() -> str:
    return str(executor_python.spark_home() / "bin" / "spark-class")


def running_master() -> int | None:
    return running_pid(master_pidfile(), MASTER_CLASS)


def master_state() -> dict | None:
    """The master's state as its UI serves it (/json), or None when it does not answer."""
    url = f"http://127.0.0.1:{ClusterPorts.from_env().spark_master_ui}/json/"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return json.load(resp)
    except (OSError, ValueError):
        return None


def _workers(state: str | None = None) -> set[str]:
    """The ids of the workers the master lists (in that state); ours is its only one."""
    master = master_state() or {}
    return {w.get("id", "") for w in master.get("workers", []) if state is None or w.get("state") == state}


def worker_registered(earlier: frozenset[str] = frozenset()) -> bool:
    """True when the master lists an ALIVE worker that is not one of `earlier` (a worker
    started anew registers under a new id)."""
    return bool(_workers("ALIVE") - earlier)


def _worker_sees(pid: int, path: Path) -> bool:
    """Whether the process's mount namespace shows path's README (through /proc/<pid>/root)."""
    return Path(f"/proc/{pid}/root{path}").joinpath("README.md").exists()


def _start_master(ports: ClusterPorts) -> None:
    for port in (ports.spark_master, ports.spark_master_ui):
        if port_open(port):
            raise StackError(f"port {port} is taken by another program; set TWOPHASE_SPARK_MASTER_PORT "
                             "or TWOPHASE_SPARK_MASTER_UI_PORT")
    print(f"stack: starting the Spark master on {master_url()}", flush=True)
    cmd = [_spark_class(), MASTER_CLASS, "--host", "127.0.0.1", "--port", str(ports.spark_master),
           "--webui-port", str(ports.spark_master_ui)]
    start_detached(cmd, master_pidfile(), master_log(), env=_environment())


def _start_worker(ports: ClusterPorts, hide: list[Path]) -> None:
    if port_open(ports.spark_worker_ui):
        raise StackError(f"port {ports.spark_worker_ui} is taken by another program; set TWOPHASE_SPARK_WORKER_UI_PORT")
    print(f"stack: starting the Spark worker ({SPARK_WORKER_CORES} cores, {SPARK_WORKER_MEMORY}; "
          f"cannot see {', '.join(map(str, hide))})", flush=True)
    # The worker's RPC port is left to Spark: a fixed one is still held (TIME_WAIT of the
    # master's connections to it) right after a restart.
    worker = [_spark_class(), WORKER_CLASS, "--host", "127.0.0.1",
              "--webui-port", str(ports.spark_worker_ui), "--cores", str(SPARK_WORKER_CORES),
              "--memory", SPARK_WORKER_MEMORY, "--work-dir", str(worker_dir()), master_url()]
    mounts = [f"mount -t tmpfs -o size=1m,mode=0555 none {shlex.quote(str(p))}" for p in hide]
    script = " && ".join([*mounts, "cd /", f"exec {shlex.join(worker)}"])
    # As root, a new mount namespace is enough; otherwise a user namespace maps us to root in it.
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    _hidden_file().write_text("".join(f"{p}\n" for p in hide))
    start_detached([*unshare, "sh", "-c", script], worker_pidfile(), worker_log(), env=_environment())


def up() -> None:
    ports = ClusterPorts.from_env()
    check_cluster_dir()
    executor_python.ensure()
    for folder in (home() / "conf", home() / "home", worker_dir()):
        folder.mkdir(parents=True, exist_ok=True)
    if running_pid(master_pidfile(), MASTER_CLASS) is None:
        _start_master(ports)
    wait_until(lambda: master_state() is not None, 60, "the Spark master", master_log())

    hide = checkouts_to_hide()
    pid = running_pid(worker_pidfile(), WORKER_CLASS)
    if pid is not None and any(_worker_sees(pid, p) for p in hide):
        # Started from another checkout: restart it hiding that one and this one.
        earlier = [Path(line) for line in _hidden_file().read_text().split()] if _hidden_file().exists() else []
        hide = sorted({*hide, *(p for p in earlier if p.exists())})
        print("stack: restarting the Spark worker: it can see this checkout", flush=True)
        stop_pid(pid, timeout=30)
        pid = None
    earlier: frozenset[str] = frozenset()
    if pid is None:
        earlier = frozenset(_workers())
        _start_worker(ports, hide)
    wait_until(lambda: worker_registered(earlier), 90, "the Spark worker's registration with the master",
               worker_log())
    pid = running_pid(worker_pidfile(), WORKER_CLASS)
    if pid is None or any(_worker_sees(pid, p) for p in checkouts_to_hide()):
        raise StackError(f"the Spark worker can see the checkout; see {worker_log()}")


def down() -> None:
    for name, pidfile, cls in (("worker", worker_pidfile(), WORKER_CLASS),
                               ("master", master_pidfile(), MASTER_CLASS)):
        pid = running_pid(pidfile, cls)
        if pid is not None:
            print(f"stack: stopping the Spark {name}", flush=True)
            stop_pid(pid, timeout=30)
        pidfile.unlink(missing_ok=True)


def status() -> str:
    master = running_pid(master_pidfile(), MASTER_CLASS)
    worker = running_pid(worker_pidfile(), WORKER_CLASS)
    if master is None and worker is None:
        return "down"
    if master is None or worker is None:
        return f"partly up (master {'up' if master else 'down'}, worker {'up' if worker else 'down'})"
    if not worker_registered():
        return f"running, but no worker registered with {master_url()}"
    return f"up, {master_url()} with 1 worker ({SPARK_WORKER_CORES} cores, {SPARK_WORKER_MEMORY})"


def destroy() -> None:
    """Stop and delete the worker's working folder and the logs (keeps the virtualenv)."""
    down()
    for path in (worker_dir(), master_log(), worker_log()):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
