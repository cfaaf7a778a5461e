"""python -m twophase status|show|recover|verify|abandon|skip-deleted|migrate: the transaction log from a shell.

Connections come from TWOPHASE_PG_DSN, TWOPHASE_KAFKA_BOOTSTRAP, TWOPHASE_ICEBERG_CATALOG and
TWOPHASE_CONNECTIONS (eval "$(scripts/stack env)" sets them for the local stack). Where
Airflow runs the pipelines, `python -m twophase_airflow` is the same commands with the
connections the DAGs use (Airflow connections), and no variable to set.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from datetime import timedelta
from typing import Callable

from ..connections import Connections
from ..gates import approval, quarantine
from ..log import MIGRATIONS, DriverBusy, PostgresLog, StateConflict, UnknownLoad
from ..protocol import coordinator, sourcing
from ..sources import Range, SourceError
from ..spec import SpecError
from . import recovery, report, show
from .verify import verify


def cmd_status(log, conns, args) -> int:
    loads = report.summaries(conns.pg_dsn, args.limit, args.pipeline)
    if args.json:
        print(json.dumps([s.to_json() for s in loads], indent=2))
        return 0
    if not loads:
        print("no loads in the transaction log yet")
        return 0
    indent = " " * 46
    print(f"{'state':<11} {'prepare':>8} {'vote':>6} {'phase2':>7} {'exposed':>8}  "
          "load_id / counts per target / reason")
    for s in loads:
        t = [f"{v:.1f}s" if v is not None else "-" for v in (s.prepare_s, s.vote_s, s.phase2_s, s.exposure_s)]
        print(f"{s.state:<11} {t[0]:>8} {t[1]:>6} {t[2]:>7} {t[3]:>8}  {s.load_id}")
        if s.counts:
            print(f"{indent}{s.describe_counts()}")
        if s.last_resource:
            print(f"{indent}{s.describe_last_resource()}")
        if s.reason:
            print(f"{indent}reason: {s.reason}")
    for key in dict.fromkeys(x.source for x in log.recent(args.limit, args.pipeline) if x.source):
        print(f"source {key}: {show.lag(log, conns, key)} behind (records, offsets or files no committed load read)")
    return 0


def cmd_show(log, conns, args) -> int:
    try:
        load = log.get(args.load_id)
    except UnknownLoad as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.rejected:
        return _show_rejected(log, load)
    if args.audit:
        if load.audit is None:
            print(f"load {load.load_id} has no audit report (state {load.state.value}: the audit did not run)",
                  file=sys.stderr)
            return 1
        print(json.dumps(load.audit, indent=2))
        return 0
    shown = show.facts(log, load, conns)
    print(json.dumps(shown, indent=2, default=str) if args.json else show.render(shown))
    return 0


def _show_rejected(log, load) -> int:
    """The load's quarantine by reason: its rejected input lines, with how many of each the
    job rejected, and the staged rows failing an audit rule (the rule as the reason)."""
    lines = log.quarantined(load.load_id)
    rejected = load.metrics.get("rejected_by_reason") or {}
    rules = {r["rule"] for r in (load.audit or {}).get("rules", [])}
    failing = sum(1 for x in lines if x.reason in rules)
    print(f"load {load.load_id}: {load.metrics.get('rejected_lines', len(lines) - failing)} rejected lines, "
          f"{len(lines) - failing} kept in the quarantine" + (f"; {failing} staged rows failing audit rules"
                                                              if failing else ""))
    reason = None
    for line in lines:
        if line.reason != reason:
            reason = line.reason
            kept = sum(1 for x in lines if x.reason == reason)
            print(f"\n{reason}: {kept} kept" + (f" of {rejected[reason]}" if reason in rejected else ""))
        print(f"  {line.describe()}")
    return 0


def cmd_recover(log, conns, args) -> int:
    actions = recovery.recover(log, conns, timedelta(minutes=args.deadline_minutes), pipeline=args.pipeline,
                               quarantine_retention=timedelta(days=args.quarantine_days),
                               stuck_after=timedelta(minutes=args.stuck_minutes))
    for action in actions:
        print(action.describe())
    if not actions:
        print("nothing to recover")
    return 1 if any(a.action == "failed" for a in actions) else 0


def cmd_verify(log, conns, args) -> int:
    findings = verify(log, conns, log.recent(args.limit, args.pipeline))
    bad = [f for f in findings if not f.ok and f.checked]
    unchecked = [f for f in findings if not f.checked]
    if args.json:
        print(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        for f in findings:
            mark = "ok  " if f.ok else "FAIL" if f.checked else "??  "
            print(f"{mark} {f.state:<11} {f.describe_visible()}  expected {f.expected}  {f.load_id}"
                  + (f"  <- {f.problem}" if f.problem else ""))
        print(f"verify: {len(findings) - len(unchecked)} loads checked, {len(bad)} violations"
              + (": " + ", ".join(f.load_id for f in bad) if bad else "")
              + (f"; {len(unchecked)} could not be checked: " + ", ".join(f.load_id for f in unchecked)
                 if unchecked else ""))
    return 1 if bad or unchecked else 0


def cmd_abandon(log, conns, args) -> int:
    """An operator's end to a rollback that cannot finish (coordinator.abandon)."""
    try:
        load = coordinator.abandon(log, args.load_id, by=getpass.getuser(), why=args.reason)
    except (StateConflict, DriverBusy, UnknownLoad) as exc:
        print(f"twophase: {exc}", file=sys.stderr)
        return 1
    print(f"load {load.load_id} is ABORTED: {load.reason}")
    return 0


def cmd_skip_deleted(log, conns, args) -> int:
    """An operator's pass over a source's records deleted before any load read them
    (sourcing.skip_deleted)."""
    try:
        skip = sourcing.skip_deleted(log, conns, args.source, by=getpass.getuser(), why=args.reason)
    except (sourcing.SourceBusy, sourcing.NothingToSkip, SourceError) as exc:
        print(f"twophase: {exc}", file=sys.stderr)
        return 1
    fixed = Range.from_json(skip.source_range)
    source = log.of_source(args.source)[-1].spec().source
    print(f"skipped {source.describe(fixed)}, by {skip.by}: {skip.why}. The next load of the source starts after it.")
    return 0


def cmd_migrate(log, conns, args) -> int:
    """main() has created or upgraded the log's schema already."""
    print(f"the transaction log's schema twophase is at version {len(MIGRATIONS)}")
    return 0


def main(argv: list[str] | None = None, connect: Callable[[], Connections] = Connections.from_env,
         prog: str = "python -m twophase") -> int:
    """The commands over the log and servers that `connect()` names (SpecError: exit 2)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0].replace("python -m twophase", prog))
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (("status", "recent loads"), ("verify", "check the invariants against the targets")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--json", action="store_true")
        p.add_argument("--limit", type=int, default=report.DEFAULT_LIMIT if name == "status" else 1000)
        p.add_argument("--pipeline")
    one = sub.add_parser("show", help="one load: its state and why, what it read and wrote, votes and history")
    one.add_argument("load_id")
    one.add_argument("--json", action="store_true", help="all of it as JSON (what the text shows, and more)")
    one.add_argument("--rejected", action="store_true", help="its rejected input lines kept in the quarantine")
    one.add_argument("--audit", action="store_true",
                     help="its audit report as JSON (twophase/audit/report.schema.json)")
    sub.add_parser("migrate", help="create or upgrade the log's schema (as its owner: docs/clusters.md)")
    aba = sub.add_parser("abandon", help="end a rollback that cannot finish (ABORTING -> ABORTED), freeing its "
                                         "data interval; once you checked nothing of the load is visible")
    aba.add_argument("load_id")
    aba.add_argument("--reason", required=True, help="why, kept with the load (who: your user name)")
    skip = sub.add_parser("skip-deleted", help="go on past a source's records that were deleted before any load "
                                               "read them (a Kafka retention); they are never loaded")
    skip.add_argument("source", help="the source's key, as its loads show it (e.g. kafka:default/orders#pipeline)")
    skip.add_argument("--reason", required=True, help="why, kept with the skip (who: your user name)")
    rec = sub.add_parser("recover", help="resolve in-doubt loads and clean orphans")
    rec.add_argument("--pipeline", help="resolve only this pipeline's loads; sweep only its orphans and quarantined lines")
    rec.add_argument("--deadline-minutes", type=float, default=recovery.DEFAULT_DEADLINE.total_seconds() / 60,
                     help="presume abort for undecided loads older than this")
    rec.add_argument("--stuck-minutes", type=float, default=recovery.DEFAULT_STUCK_AFTER.total_seconds() / 60,
                     help="report a decided load that still cannot finish this long after its decision as failed")
    rec.add_argument("--quarantine-days", type=float, default=quarantine.DEFAULT_RETENTION.days,
                     help="delete rejected lines kept in the quarantine longer than this")
    args = parser.parse_args(argv)
    try:
        conns = connect()
    except SpecError as exc:
        print(f"twophase: {exc}", file=sys.stderr)
        return 2
    log = PostgresLog(conns.pg_dsn)
    log.ensure_schema()
    commands = {"status": cmd_status, "show": cmd_show, "recover": cmd_recover, "verify": cmd_verify,
                "migrate": cmd_migrate, "abandon": cmd_abandon, "skip-deleted": cmd_skip_deleted}
    return commands[args.command](log, conns, args)
