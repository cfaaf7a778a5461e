"""Independent check of the promise, read from the targets themselves.

For each load, what readers see in every target (each participant's `visible`, counted
by a real reader: rows by load_id, records by their load_id header as read_committed)
against the log:
COMMITTED -> exactly the voted counts; not committed -> nothing in any target;
COMMITTING -> in doubt (recovery finishes it), flagged only when a target that commits
after the first shows data; VIOLATED -> always a violation. A committed load whose
interval a later committed load replaced is expected to have 0 left in targets that
replace (tables), and all of it still in append-only ones (topics).

Each load is judged on its own: one whose participants cannot be built (a connection that
is not configured), or whose targets cannot be read, is a finding that says so, and the
others are still checked.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..connections import Connections
from ..errors import root_cause
from ..log import Load, TransactionLog
from ..participants import commit_order
from ..participants.contract import Participant
from ..protocol.states import State
from ..protocol.votes import Vote


@dataclass(frozen=True)
class Finding:
    load_id: str
    state: str
    visible: dict[str, int]     # per target: rows or records readers see
    expected: str
    ok: bool
    problem: str = ""
    checked: bool = True        # False: the load could not be checked now (`problem` says why)

    def to_json(self) -> dict:
        return asdict(self)

    def describe_visible(self) -> str:
        return " ".join(f"{target}={n}" for target, n in self.visible.items())


def verify(log: TransactionLog, conns: Connections, loads: list[Load]) -> list[Finding]:
    """One finding per load. Each participant (the same kind and targets) is asked once
    for all the loads that use it, so a topic is read once however many loads there are."""
    parts: dict[str, list[Participant]] = {}
    unchecked: dict[str, str] = {}  # load id -> why it cannot be checked
    for load in loads:
        try:
            parts[load.load_id] = conns.participants(load.spec())
        except Exception as exc:  # noqa: BLE001 - one load's bad description must not hide the others
            unchecked[load.load_id] = f"its participants cannot be built: {root_cause(exc)}"
    groups: dict[tuple, list[str]] = {}
    sample: dict[tuple, Participant] = {}
    for lid, built in parts.items():
        for p in built:
            key = (type(p), p.targets, p.endpoint)
            groups.setdefault(key, []).append(lid)
            sample[key] = p
    seen: dict[str, dict[str, int]] = {load.load_id: {} for load in loads}
    for key, load_ids in groups.items():
        try:
            visible = sample[key].visible(load_ids)
        except Exception as exc:  # noqa: BLE001 - a server down: these loads cannot be checked now
            for lid in load_ids:
                unchecked.setdefault(lid, f"{', '.join(key[1])} cannot be read: {root_cause(exc)}")
            continue
        for lid, counts in visible.items():
            seen[lid].update(counts)
    votes = log.votes_of([load.load_id for load in loads])
    replaced = _replaced_later(loads)
    return [Finding(load.load_id, load.state.value, seen[load.load_id], "?", False,
                    f"cannot be checked: {unchecked[load.load_id]}", checked=False) if load.load_id in unchecked else
            _judge(load, parts[load.load_id], votes.get(load.load_id, {}), seen[load.load_id],
                   load.load_id in replaced) for load in loads]


def _voted(p: Participant, vote: Vote | None) -> dict[str, int]:
    """Per target, what the participant voted it staged (a vote logged before per-target
    counts covers the participant's one target)."""
    if vote is None:
        return {t: 0 for t in p.targets}
    return vote.counts or {p.targets[0]: vote.count}


def _judge(load: Load, parts: list[Participant], votes: dict[str, Vote], seen: dict[str, int],
           replaced: bool) -> Finding:
    def finding(expected, ok, problem=""):
        return Finding(load.load_id, load.state.value, seen, expected, ok, problem)

    if load.state == State.COMMITTED:
        want = {t: 0 if replaced and not p.append_only else n
                for p in parts for t, n in _voted(p, votes.get(p.name)).items()}
        ok = seen == want
        return finding(", ".join(f"{t}={n}" for t, n in want.items()), ok,
                       "" if ok else "committed load not exactly visible")
    if load.state == State.VIOLATED:
        return finding("-", False, f"load is VIOLATED: {load.reason}")
    if load.state == State.COMMITTING:
        # Participants commit in order: a prefix of them may be visible, each wholly.
        ok, gap = True, False
        for p in commit_order(parts):
            voted = _voted(p, votes.get(p.name))
            shown = {t: seen.get(t, 0) for t in p.targets}
            whole = shown == voted
            empty = not any(shown.values())
            ok = ok and (empty or (whole and not gap))
            gap = gap or not whole
        return finding("in doubt: commit pending (recovery finishes it)", ok,
                       "" if ok else "partly visible while committing")
    ok = not any(seen.values())
    return finding("nothing visible", ok, "" if ok else f"{load.state} load has visible data")


def _replaced_later(loads: list[Load]) -> set[str]:
    """The loads a later committed load swapped out: it names them as loads it replaces
    (begin of a data interval in mode replace), or it replaces the same rows of a target
    (same key values) and began later. Linear in the loads: each spec is read once."""
    specs = {load.load_id: load.spec() for load in loads}
    committed = [load for load in loads if load.state == State.COMMITTED]
    replaced = {lid for load in committed for lid in specs[load.load_id].replaces}
    latest: dict = {}
    for load in committed:
        for key in specs[load.load_id].replace_keys():
            latest[key] = max(latest.get(key, load.began_at), load.began_at)
    for load in loads:
        if any(latest.get(key, load.began_at) > load.began_at for key in specs[load.load_id].replace_keys()):
            replaced.add(load.load_id)
    return replaced
