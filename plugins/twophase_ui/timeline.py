"""A load's timeline, from what the log keeps: the spans a load's page draws to scale.

The log stamps each state change (began_at, prepared_at, exposed_at, decided_at,
finished_at, and twophase.transitions), the audit's end (its report's audited_at) and a
person's approval (asked_at, answered_at). It keeps each participant's commit as seconds
(loads.outcomes), not as a start and an end: those commits are placed back to back in
commit order, ending when the load's commit ended (COMMITTED is logged right after the
last one), and marked `estimated`. Nothing here reads a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace

from twophase.participants import commit_order, participant_name
from twophase.participants.kinds import KINDS
from twophase.protocol.states import State

LOAD, EXPOSURE = "Load", "Exposure"


@dataclass(frozen=True)
class Span:
    """One bar of the timeline: what happened (or was held) on `lane` from `start` to `end`."""

    lane: str
    label: str
    start: datetime
    end: datetime
    note: str = ""
    estimated: bool = False  # placed from a logged duration, not from logged times
    ongoing: bool = False    # not over yet: `end` is the page's now

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True)
class Target:
    """A target of the load and the participant that commits it."""

    kind: str
    name: str
    participant: str
    connection: str


def targets_of(load) -> list[Target]:
    """The load's targets (from its spec in the log), each with its participant's name;
    [] when this release cannot rebuild the spec."""
    try:
        spec = load.spec()
    except Exception:  # noqa: BLE001 - an older or newer spec: the page shows what it can without it
        return []
    classes = {name: kind.participant_class() for name, kind in KINDS.items()}
    return [Target(t.kind, t.name, participant_name(t.kind, t.connection, classes[t.kind].group_of(t)), t.connection)
            for t in spec.targets]


def ordered_participants(load, targets: list[Target]) -> list[str]:
    """The load's participants in the order phase 2 commits them (participants.commit_order)."""
    last = ((load.participants or {}).get("last_resource") or {}).get("participant")
    seen = {t.participant: KINDS[t.kind].participant_class() for t in targets}
    stand_ins = [SimpleNamespace(name=name, last_resource=name == last, commit_may_fail=cls.commit_may_fail,
                                 commit_risk=cls.commit_risk) for name, cls in seen.items()]
    return [p.name for p in commit_order(stand_ins)]


def _at(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _phases(load, now: datetime) -> list[Span]:
    """The load's own lane: prepare, audit, approval wait, vote, phase 2."""
    end = lambda t: (t, False) if t else (now, True)  # noqa: E731
    spans = []
    prepared, ongoing = end(load.prepared_at or (load.decided_at if load.state != State.PREPARING else None))
    spans.append(Span(LOAD, "prepare" if load.prepared_at or ongoing else "prepare (never finished)",
                      load.began_at, prepared, "Spark stages the rows to every target; nothing is held",
                      ongoing=ongoing))
    last = load.prepared_at
    audited = _at((load.audit or {}).get("audited_at"))
    if load.prepared_at and audited:
        spans.append(Span(LOAD, f"audit: {load.audit.get('verdict')}", load.prepared_at, audited,
                          f"{len(load.audit.get('rules', []))} rules over the staged rows"))
        last = audited
    approval = load.approval or {}
    waiting = bool(approval.get("asked_at")) and not approval.get("answered_at") and not load.decided_at
    if approval.get("asked_at"):
        answered, ongoing = end(_at(approval.get("answered_at")) or (load.decided_at if not waiting else None))
        spans.append(Span(LOAD, "approval wait", _at(approval["asked_at"]), answered,
                          approval.get("decision") or ("waiting for a person" if waiting else "not answered"),
                          ongoing=ongoing))
        last = answered if not ongoing else last
    if load.prepared_at and (load.decided_at or (load.state == State.PREPARED and not waiting)):
        decided, ongoing = end(load.decided_at)
        start = min(max(t for t in (last, load.prepared_at) if t), decided)
        spans.append(Span(LOAD, "vote", start, decided, "counts checked, participants made ready, decision logged",
                          ongoing=ongoing))
    if load.decided_at:
        finished, ongoing = end(load.finished_at)
        spans.append(Span(LOAD, "commit" if load.decision == "COMMIT" else "rollback", load.decided_at, finished,
                          f"phase 2 of decision {load.decision}", ongoing=ongoing))
    return spans


def _held(load, target_of: dict[str, list[Target]], votes: dict, commits: dict[str, tuple[datetime, datetime]],
          now: datetime) -> list[Span]:
    """What each participant held on its servers, and when it committed."""
    last = ((load.participants or {}).get("last_resource") or {}).get("participant")
    end_of_load = load.finished_at or now
    spans = []
    for participant, targets in target_of.items():
        kind, names = targets[0].kind, ", ".join(t.name for t in targets)
        vote = votes.get(participant)
        commit = commits.get(participant)
        committed_last = participant == last and load.decision == "COMMIT" and load.decided_at
        staged_until = commit[0] if commit else load.decided_at if committed_last else end_of_load
        if vote is not None and load.prepared_at:
            spans.append(Span(participant, "staged", load.began_at, staged_until, _staged_note(kind, names, vote),
                              ongoing=load.finished_at is None and not commit))
        if kind == "postgres" and participant != last and load.exposed_at and vote is not None:
            gid = (vote.committable or {}).get("gid", "")
            held_until = commit[1] if commit else end_of_load
            spans.append(Span(participant, "prepared transaction", load.exposed_at, held_until,
                              f"{gid}: locks on {names} from the vote's ready to COMMIT PREPARED",
                              estimated=commit is not None, ongoing=load.finished_at is None and not commit))
        if committed_last:
            spans.append(Span(participant, "committed (last resource)", load.decided_at, load.decided_at,
                              "its commit, in the vote, was the decision"))
        elif commit:
            spans.append(Span(participant, "commit", *commit, _commit_note(kind), estimated=True))
    return spans


def _staged_note(kind: str, names: str, vote) -> str:
    detail = vote.committable or {}
    if kind == "kafka":
        topics = detail.get("topics") or []
        return "records in " + (", ".join(c.get("staging_topic", "?") for c in topics) or "the staging topic")
    if kind == "iceberg":
        return f"{len(detail.get('files') or [])} Parquet files in {detail.get('directory', 'the staging directory')}"
    if kind == "postgres":
        return f"rows in staging tables of {names}; no lock until the vote"
    return f"staged for {names}"


def _commit_note(kind: str) -> str:
    return {"postgres": "COMMIT PREPARED", "kafka": "copy into the topic in one Kafka transaction",
            "iceberg": "one snapshot adding the staged files"}.get(kind, "commit")


def commits(load, order: list[str]) -> dict[str, tuple[datetime, datetime]]:
    """Each participant's commit (start, end), back to back in commit order and ending
    when the load's commit ended; the last resource's is in the vote, not here."""
    if not load.outcomes or load.finished_at is None or load.decision != "COMMIT":
        return {}
    last = ((load.participants or {}).get("last_resource") or {}).get("participant")
    placed, end = {}, load.finished_at
    for participant in reversed([p for p in order if p in load.outcomes and p != last]):
        start = max(end - timedelta(seconds=load.outcomes[participant].get("seconds") or 0), load.decided_at)
        placed[participant] = (start, end)
        end = start
    return placed


def spans(load, votes: dict, now: datetime) -> list[Span]:
    """Every span of the load's timeline: its phases, its exposure window, then what each
    participant held and its commit, lane by lane in commit order."""
    targets = targets_of(load)
    order = ordered_participants(load, targets)
    by_participant = {p: [t for t in targets if t.participant == p] for p in order}
    result = _phases(load, now)
    if load.exposed_at:
        end = load.finished_at or now
        result.append(Span(EXPOSURE, "exposure window", load.exposed_at, end,
                           "from the vote making participants ready to the end of phase 2",
                           ongoing=load.finished_at is None))
    return result + _held(load, by_participant, votes, commits(load, order), now)
