"""Where a parallel run's wall time went: each test's start and end on its worker, written
to test-artifacts/timeline/<worker>.jsonl (setup, call and teardown together), and a line at
the end of the run with each worker's busy share and when it ran out of work. A worker that
idles long before the last one ends is time a better order of the tests would win
(tests/conftest.py, pytest_collection_modifyitems).

`python tests/timeline.py` prints the longest gaps and the run's last tests from those files.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "test-artifacts" / "timeline"


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def pytest_sessionstart(session):
    if _worker() == "main":  # the controller (or the one process): a fresh timeline
        FOLDER.mkdir(parents=True, exist_ok=True)
        for old in FOLDER.glob("*.jsonl"):
            old.unlink()
        session.config._timeline_started = time.time()


def pytest_runtest_protocol(item, nextitem):
    started = time.time()
    yield
    with open(FOLDER / f"{_worker()}.jsonl", "a") as out:
        out.write(json.dumps({"test": item.nodeid, "start": started, "end": time.time()}) + "\n")


pytest_runtest_protocol.hookwrapper = True


def read(folder: Path = FOLDER) -> dict[str, list[dict]]:
    """Each worker's tests, in the order they ran."""
    return {path.stem: sorted((json.loads(line) for line in path.open()), key=lambda t: t["start"])
            for path in sorted(folder.glob("*.jsonl"))}


def busy_lines(workers: dict[str, list[dict]], started: float, ended: float) -> list[str]:
    """Per worker: the share of [started, ended] it ran tests, and how long before the end
    its last test ended."""
    span = max(ended - started, 1e-9)
    return [f"{name}: busy {sum(t['end'] - t['start'] for t in tests) / span:.0%}, "
            f"out of work {ended - tests[-1]['end']:.0f} s before the end"
            for name, tests in workers.items() if tests]


def pytest_terminal_summary(terminalreporter, config):
    started = getattr(config, "_timeline_started", None)
    workers = read() if started is not None else {}
    if not workers:
        return
    terminalreporter.write_sep("-", f"timeline ({FOLDER.relative_to(FOLDER.parents[1])})")
    for line in busy_lines(workers, started, time.time()):
        terminalreporter.write_line(line)


def main() -> None:
    workers = read()
    if not workers:
        sys.exit(f"no timeline in {FOLDER}: run the tests first")
    start = min(t["start"] for tests in workers.values() for t in tests)
    end = max(t["end"] for tests in workers.values() for t in tests)
    print("\n".join(busy_lines(workers, start, end)))
    for name, tests in workers.items():
        print(f"\n{name}: last tests")
        for t in tests[-5:]:
            print(f"  {t['start'] - start:7.0f} .. {t['end'] - start:7.0f}  {t['test']}")
        gaps = sorted(((b["start"] - a["end"], a["end"] - start) for a, b in zip(tests, tests[1:])), reverse=True)
        for gap, at in gaps[:3]:
            if gap >= 1:
                print(f"  idle {gap:.0f} s at {at:.0f} s")


if __name__ == "__main__":
    main()
