"""The pipeline of docs/guide.md: its code blocks that name a file (```python <path>),
which tests/unit/test_guide_blocks.py counts and tests/pipeline/test_guide.py runs."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"
_BLOCK = re.compile(r"^```python (\S+)\n(.*?)^```$", re.S | re.M)


def guide_files() -> dict[str, str]:
    """{path in the project: its text}, as the guide gives them."""
    return dict(_BLOCK.findall(GUIDE.read_text(encoding="utf-8")))


def write_project(root: Path) -> Path:
    """The guide's files under `root` (a project of its own: dags/, spark_jobs/)."""
    for path, text in guide_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def code_lines(text: str) -> int:
    """Lines that are not blank."""
    return sum(1 for line in text.splitlines() if line.strip())
