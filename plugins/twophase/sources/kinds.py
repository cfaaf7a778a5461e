"""Every kind of source, one line each: the one place that names them (the form a load's
source takes in the log names its kind)."""

from __future__ import annotations

from dataclasses import asdict

from ..errors import SpecError
from .files import FilesSource
from .kafka import KafkaSource
from .memory import MemorySource

SOURCES = {cls.kind: cls for cls in (MemorySource, FilesSource, KafkaSource)}


def source_to_json(source) -> dict:
    return {"kind": source.kind, **asdict(source)}


def source_from_json(data: dict):
    data = dict(data)
    kind = data.pop("kind")
    if kind not in SOURCES:
        raise SpecError(f"unknown kind of source {kind!r}; known: {', '.join(SOURCES)}")
    return SOURCES[kind](**data)
