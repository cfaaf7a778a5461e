"""What a load writes where: its targets, as plain data.

A LoadSpec is stored with the load in the transaction log (planned participants), so
recovery can finish or discard a load without the pipeline's code. Its targets are of the
kinds in twophase.participants.kinds; this module names none of them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from . import schema
from .errors import SpecError
from .participants.kinds import KINDS
from .sources.contract import Source
from .sources.kinds import source_from_json, source_to_json

__all__ = ["LoadSpec", "SpecError", "last_resource_line", "target_from_json", "target_to_json"]


def target_from_json(data: dict):
    """The target of its kind's class (participants/<kind>/target.py)."""
    data = dict(data)
    kind = data.pop("kind")
    if kind not in KINDS:
        raise SpecError(f"unknown kind of target {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[kind].target(**data)


def target_to_json(target) -> dict:
    return {"kind": target.kind, **asdict(target)}


def last_resource_line(participant: str, why: str) -> str:
    """How a load with a last resource commits, in one line (logs, status, show, the page)."""
    return (f"{participant} commits last, without a prepared transaction ({why}): its commit is the load's "
            "decision, once every other participant is ready")


@dataclass(frozen=True)
class LoadSpec:
    """One load: its id, where it comes from, and its targets (any number, any kinds;
    names unique). Stored with the load in the transaction log, so recovery can finish or
    discard it without the pipeline's code."""

    load_id: str
    pipeline: str
    run_id: str
    targets: tuple = ()
    data_interval: tuple[str, str] | None = None  # ISO timestamps
    input: dict[str, Any] = field(default_factory=dict)
    replaces: tuple[str, ...] = ()  # the committed loads of the interval this one replaces
    source: Any = None  # where its input comes from (twophase.sources), or None: the job's own business
    source_range: dict | None = None  # what it reads of the source, fixed at begin (sources.Range as JSON)
    # The participant that commits last, its commit the decision (docs/adr/0011), and why
    # it cannot prepare; both fixed at begin ('' = every participant prepares).
    last_resource: str = ""
    last_resource_why: str = ""
    # The Airflow DAG whose runs load the pipeline (None outside Airflow): one per pipeline
    # (coordinator.begin), whose read permission the Transactions pages ask.
    dag_id: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(getattr(t, "in_interval", lambda _: t)(self.data_interval)
                                                  for t in self.targets))
        object.__setattr__(self, "replaces", tuple(self.replaces))
        if not self.targets:
            raise SpecError(f"load {self.load_id} has no targets: name at least one table or topic")
        names = [t.name for t in self.targets]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise SpecError(f"load {self.load_id} names the target(s) {twice} twice: each table and topic once")
        schema.declared(self.targets)  # one schema per frame
        if self.source is not None and not isinstance(self.source, Source):
            raise SpecError(f"load {self.load_id}: its source must be a source of twophase.sources (a FilesSource, "
                            f"...), got {self.source!r}")

    @property
    def mode(self) -> str:
        """replace when any target replaces the interval's rows, else append."""
        return "replace" if any(t.mode == "replace" for t in self.targets) else "append"

    def replacing(self, replaces: list[str]) -> "LoadSpec":
        """This load as the replacement of `replaces` (each target marks it its own way)."""
        return replace(self, targets=tuple(t.for_replacement(replaces) for t in self.targets),
                       replaces=tuple(replaces))

    def describe_last_resource(self) -> str:
        """'' when every participant prepares."""
        return last_resource_line(self.last_resource, self.last_resource_why) if self.last_resource else ""

    def replace_keys(self) -> list[tuple[str, str]]:
        """(target, the rows it replaces) of each target in mode replace: two loads with a
        key in common replace the same rows of that target."""
        return [(t.name, json.dumps(getattr(t, "replaced", getattr(t, "replace_where", {})), sort_keys=True,
                                    default=str))
                for t in self.targets if t.mode == "replace"]

    def to_log(self) -> dict:
        """The form stored in the log's `participants` column."""
        return {"targets": [target_to_json(t) for t in self.targets], "replaces": list(self.replaces),
                **({"source": source_to_json(self.source)} if self.source is not None else {}),
                **({"last_resource": {"participant": self.last_resource, "why": self.last_resource_why}}
                   if self.last_resource else {}),
                **({"dag_id": self.dag_id} if self.dag_id is not None else {})}

    @classmethod
    def from_log(cls, row: dict) -> "LoadSpec":
        stored = row["participants"]
        if "targets" in stored:
            targets = tuple(target_from_json(t) for t in stored["targets"])
            replaces = tuple(stored.get("replaces", ()))
        else:  # logged before issue 12: {"postgres": {...}, "kafka": {...}}, one of each
            targets = (KINDS["postgres"].target(**stored["postgres"]), KINDS["kafka"].target(**stored["kafka"]))
            replaces = tuple(x for x in stored["kafka"].get("headers", {}).get("twophase.replaces", "").split(",") if x)
        interval = row.get("data_interval_start"), row.get("data_interval_end")
        return cls(
            load_id=row["load_id"], pipeline=row["pipeline"], run_id=row["run_id"], targets=targets,
            data_interval=None if interval == (None, None) else tuple(str(x) for x in interval),
            input=row.get("input") or {}, replaces=replaces,
            source=source_from_json(stored["source"]) if stored.get("source") else None,
            source_range=row.get("source_range"),
            last_resource=stored.get("last_resource", {}).get("participant", ""),
            last_resource_why=stored.get("last_resource", {}).get("why", ""),
            dag_id=stored.get("dag_id"),
        )
