"""python -m twophase status|show|recover|verify: the transaction log from a shell.

Connections come from TWOPHASE_PG_DSN and TWOPHASE_KAFKA_BOOTSTRAP
(eval "$(scripts/stack env)" sets both for the local stack).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta

from . import recovery
from .log import Load, TransactionLog, UnknownLoad
from .spec import Connections, SpecError
from .verify import verify


def _seconds(a, b) -> float | None:
    return round((b - a).total_seconds(), 3) if a and b else None


def _summary(log: TransactionLog, load: Load) -> dict:
    votes = log.votes(load.load_id)
    return {
        "load_id": load.load_id, "pipeline": load.pipeline, "run_id": load.run_id, "state": load.state.value,
        "decision": load.decision, "reason": load.reason,
        "data_interval_start": load.data_interval_start.isoformat() if load.data_interval_start else None,
        "rows": votes["postgres"].count if "postgres" in votes else None,
        "records": votes["kafka"].count if "kafka" in votes else None,
        "began_at": load.began_at.isoformat(),
        "prepare_s": _seconds(load.began_at, load.prepared_at),
        "vote_s": _seconds(load.prepared_at, load.decided_at),
        "phase2_s": _seconds(load.decided_at, load.finished_at),
    }


def cmd_status(log, conns, args) -> int:
    loads = [_summary(log, l) for l in log.recent(args.limit, args.pipeline)]
    if args.json:
        print(json.dumps(loads, indent=2))
        return 0
    if not loads:
        print("no loads in the transaction log yet")
        return 0
    print(f"{'state':<11} {'rows':>9} {'records':>9} {'prepare':>8} {'vote':>6} {'phase2':>7}  load_id / reason")
    for s in loads:
        t = [f"{s[k]:.1f}s" if s[k] is not None else "-" for k in ("prepare_s", "vote_s", "phase2_s")]
        print(f"{s['state']:<11} {_n(s['rows']):>9} {_n(s['records']):>9} {t[0]:>8} {t[1]:>6} {t[2]:>7}  {s['load_id']}")
        if s["reason"]:
            print(f"{'':<59}reason: {s['reason']}")
    return 0


def _n(value) -> str:
    return "-" if value is None else str(value)


def cmd_show(log, conns, args) -> int:
    try:
        load = log.get(args.load_id)
    except UnknownLoad as exc:
        print(exc, file=sys.stderr)
        return 1
    print(json.dumps({
        **_summary(log, load), "participants": load.participants, "input": load.input,
        "expected_rows": load.expected_rows, "metrics": load.metrics, "prepare_error": load.prepare_error,
        "votes": {name: v.to_json() for name, v in log.votes(load.load_id).items()},
        "history": [{"from": t.from_state, "to": t.to_state, "reason": t.reason, "at": t.at.isoformat()}
                    for t in log.history(load.load_id)],
    }, indent=2, default=str))
    return 0


def cmd_recover(log, conns, args) -> int:
    actions = recovery.recover(log, conns, timedelta(minutes=args.deadline_minutes))
    for action in actions:
        print(action.describe())
    if not actions:
        print("nothing to recover")
    return 1 if any(a.action == "failed" for a in actions) else 0


def cmd_verify(log, conns, args) -> int:
    findings = verify(log, conns, log.recent(args.limit, args.pipeline))
    bad = [f for f in findings if not f.ok]
    if args.json:
        print(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        for f in findings:
            mark = "ok  " if f.ok else "FAIL"
            print(f"{mark} {f.state:<11} {f.describe_visible()}  expected {f.expected}  {f.load_id}"
                  + (f"  <- {f.problem}" if f.problem else ""))
        print(f"verify: {len(findings)} loads checked, {len(bad)} violations"
              + (": " + ", ".join(f.load_id for f in bad) if bad else ""))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m twophase", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (("status", "recent loads"), ("verify", "check the invariants against the targets")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--json", action="store_true")
        p.add_argument("--limit", type=int, default=20 if name == "status" else 1000)
        p.add_argument("--pipeline")
    sub.add_parser("show", help="one load: votes and transition history").add_argument("load_id")
    rec = sub.add_parser("recover", help="resolve in-doubt loads and clean orphans")
    rec.add_argument("--deadline-minutes", type=float, default=recovery.DEFAULT_DEADLINE.total_seconds() / 60,
                     help="presume abort for undecided loads older than this")
    args = parser.parse_args(argv)
    try:
        conns = Connections.from_env()
    except SpecError as exc:
        print(f"twophase: {exc}", file=sys.stderr)
        return 2
    log = TransactionLog(conns.pg_dsn)
    log.ensure_schema()
    commands = {"status": cmd_status, "show": cmd_show, "recover": cmd_recover, "verify": cmd_verify}
    return commands[args.command](log, conns, args)
