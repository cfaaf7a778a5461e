"""Local-only secrets, generated on first use and kept in the stack folder (mode 600).

Nothing here is a default password in code: each checkout makes its own.
"""

from __future__ import annotations

import json
import os
import secrets as _random

from .settings import stack_dir


def load() -> dict[str, str]:
    path = stack_dir() / "secrets.json"
    if path.exists():
        return json.loads(path.read_text())
    values = {
        "pipeline_password": _random.token_urlsafe(24),
        "airflow_jwt_secret": _random.token_urlsafe(64),
        "airflow_admin_password": _random.token_urlsafe(12),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return values
