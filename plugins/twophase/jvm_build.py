"""Java classes of the product's own, compiled on the machine that runs them, once.

The product ships Java sources, not jars: the Kafka commit copy
(participants/kafka/jvm/StagedCopy.java) and the Java functions a Spark job registers
(spark/java_functions.py). Each is compiled by the JDK found on the PATH or under
JAVA_HOME against the classpath it will run with, into a jar in the machine's cache:

    $TWOPHASE_CACHE_DIR (else $XDG_CACHE_HOME/twophase, else ~/.cache/twophase)/<kind>/<key>/<name>.jar

keyed by the sources and the classpath, so a changed source or library builds anew. One
process builds at a time (a lock per key); the others wait and use its jar. A jar is
built aside and renamed into place: a reader sees none or the whole of it. Each use marks
its build (the folder's time); a new build removes the builds of its kind that no process
used for KEEP_DAYS, so the versions a machine ran do not pile up.

Where it cannot be built (no JDK, a source that does not compile) JvmUnavailable says
why, and the caller does the same work without it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

from .errors import one_line

KEEP_DAYS = 14


class JvmUnavailable(RuntimeError):
    """A class of the product's cannot run here (no JDK, its source does not compile, the
    JVM does not start): the work runs without it."""


def java_tool(tool: str) -> str:
    """The JDK's `tool` (java, javac, jar): under JAVA_HOME, else on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / tool) if home and (Path(home) / "bin" / tool).exists() else shutil.which(tool)
    if not found:
        raise JvmUnavailable(f"no JDK's {tool} is on the PATH or under JAVA_HOME")
    return found


def cache_dir() -> Path:
    return Path(os.environ.get("TWOPHASE_CACHE_DIR")
                or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "twophase")


def built(kind: str, name: str, sources: list[Path], classpath: str,
          then: Callable[[Path], None] | None = None) -> Path:
    """The folder holding `name`.jar, the classes of `sources` compiled against
    `classpath`, built once per sources and classpath (see the module doc). `then` runs on
    the folder once, right after it is built and in place, under the lock (the Kafka copy
    writes its class archive there)."""
    digest = hashlib.sha256(classpath.encode())
    for source in sources:
        digest.update(source.read_bytes())
    key = digest.hexdigest()[:16]
    folder = cache_dir() / kind / key
    jar = f"{name}.jar"
    if (folder / jar).exists():
        _mark_used(folder)
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / jar).exists():
            building = folder.with_name(key + ".building")
            shutil.rmtree(building, ignore_errors=True)
            classes = building / "classes"
            _run(java_tool("javac"), "-nowarn", "-cp", classpath, "-d", str(classes), *map(str, sources),
                 what=f"compiling {', '.join(s.name for s in sources)}")
            _run(java_tool("jar"), "--create", "--file", str(building / jar), "-C", str(classes), ".",
                 what=f"making {jar}")
            building.rename(folder)
            if then is not None:
                then(folder)
            _prune(folder)
    return folder


def _mark_used(folder: Path) -> None:
    try:
        os.utime(folder)
    except OSError:  # a cache it may read but not write: it is then never pruned either
        pass


def _prune(kept: Path) -> None:
    """Remove the builds of kept's kind that no process used for KEEP_DAYS (their lock
    files stay: a process may hold one)."""
    horizon = time.time() - KEEP_DAYS * 86400
    for other in kept.parent.iterdir():
        if other != kept and other.is_dir() and other.stat().st_mtime < horizon:
            shutil.rmtree(other, ignore_errors=True)


def _run(*argv: str, what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise JvmUnavailable(f"{what} failed: {one_line(done.stderr, 600)}")
