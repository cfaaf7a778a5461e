"""The browser the UI tests drive: Chromium from Debian's packages (Playwright cannot
download its own here). Installed with apt when missing."""

from __future__ import annotations

import os
from pathlib import Path

from .proc import StackError, run

CHROMIUM = Path("/usr/bin/chromium")


def ensure_installed() -> Path:
    if not CHROMIUM.exists():
        if os.geteuid() != 0:
            raise StackError(f"{CHROMIUM} is missing; run as root or `apt-get install chromium`")
        print("stack: installing Chromium from Debian's packages (apt-get, first time: ~1 min)", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-q"], env=env)
        run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"], env=env)
    return CHROMIUM
