"""Random edits of plain lines, for holding two implementations of one grammar to each
other (the example's fast paths in Java and in Spark SQL)."""

from __future__ import annotations

import random


def edited(rng: random.Random, plain: list[str], count: int, alphabet: list[str], edits: list[int]) -> list[str]:
    """`count` lines, each one of `plain` with rng.choice(edits) characters inserted,
    deleted or replaced (by one of `alphabet`) at random places."""
    lines = []
    for _ in range(count):
        line = list(rng.choice(plain))
        for _ in range(rng.choice(edits)):
            at = rng.randrange(len(line) + 1)
            edit = rng.choice(["insert", "delete", "replace"])
            if edit == "insert":
                line.insert(at, rng.choice(alphabet))
            elif at < len(line):
                line[at:at + 1] = [] if edit == "delete" else [rng.choice(alphabet)]
        lines.append("".join(line))
    return lines
