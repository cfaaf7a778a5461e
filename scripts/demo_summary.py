"""Prints what a demo DAG run did: the load, its state and reason, each participant's
vote and what readers see in each target (counted independently of the log), rejects,
and where to look next.

Usage: demo_summary.py DAG_RUN_LOG DAY
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from twophase.connections import Connections
from twophase.log import PostgresLog
from twophase.ops.verify import verify


def main(run_log: Path, day: str) -> int:
    text = run_log.read_text(errors="replace")
    finished = re.findall(r"DagRun Finished: .*? run_id=(\S+), .*? state=(\w+)", text)
    if not finished:
        print(f"  the DAG run did not finish; see {run_log}")
        return 1
    run_id, run_state = finished[-1]
    conns = Connections.from_env()
    log = PostgresLog(conns.pg_dsn)
    loads = [x for x in log.recent(200, "orders_daily_totals") if x.run_id == run_id]
    print(f"  DAG run   {run_id}: {run_state}")
    if not loads:
        said = re.search(r"nothing to do: (.*?) \[twophase\]", text)
        print(f"  no new load: {said.group(1) if said else 'begin skipped the load'}")
        return 0
    load = loads[0]
    [finding] = verify(log, conns, [load])
    votes = log.votes(load.load_id)
    print(f"  load      {load.load_id}")
    print(f"  state     {load.state}" + (f": {load.reason}" if load.reason else ""))
    m = load.metrics
    print(f"  input     {m.get('input_lines', '-')} lines in {m.get('input_files', '-')} files for {day}: "
          f"{m.get('orders', '-')} orders, {m.get('rejected_lines', '-')} rejected (kept in {load.input.get('rejects')}), "
          f"{m.get('duplicate_lines', '-')} duplicate deliveries, {m.get('blank_lines', '-')} blank; "
          f"{m.get('skipped_files', '-')} files not read")
    if load.spec().last_resource:
        print(f"  commit    {load.spec().describe_last_resource()}")
    for vote in votes.values():
        print(f"  {vote.participant:<9} {vote.summary or vote.count}")
    for target, seen in finding.visible.items():
        print(f"  target    {target}: {seen} of this load visible to readers now (read committed)")
    lakes = [t.table for t in load.spec().targets if t.kind == "iceberg"]
    for table in lakes:
        print(f"  snapshot  iceberg:{table}: {iceberg_snapshot(conns, table, load.load_id)}")
    print(f"  verify    {'ok' if finding.ok else 'VIOLATION: ' + finding.problem} (expected {finding.expected})")
    print()
    print("  look next:")
    print(f"    python -m twophase show {load.load_id}")
    print("    python -m twophase status          # recent loads; verify checks every invariant")
    first_table = next(iter(finding.visible), "")
    print(f"    psql \"$TWOPHASE_PG_DSN\" -c \"select * from {first_table} where day = '{day}' limit 5\"")
    for table in lakes:
        print(f"    python -c \"import os; from twophase.participants.iceberg import catalog_of; "
              f"t = catalog_of(os.environ['TWOPHASE_ICEBERG_CATALOG']).load_table('{table}'); "
              f"print(t.scan(row_filter=\\\"day = '{day}'\\\").to_arrow().num_rows)\"")
        print(f"    scripts/stack iceberg-sql -e \"select count(*) from twophase.{table} where day = '{day}'\"")
    print(f"    task logs of the run: {run_log}")
    return 0


def iceberg_snapshot(conns: Connections, table: str, load_id: str) -> str:
    """The Iceberg snapshot that committed the load, as one line."""
    from twophase.participants.iceberg import catalog_of, committed_by

    try:
        snapshots = committed_by(catalog_of(conns.iceberg_catalog).load_table(table), load_id)
    except Exception as exc:  # noqa: BLE001 - a summary line, not a check: say why
        return f"not read ({exc})"
    if not snapshots:
        return "none carries this load"
    return "; ".join(f"{s.summary.operation.value} snapshot {s.snapshot_id}: "
                     f"{s.summary.get('added-records') or 0} rows added, {s.summary.get('deleted-records') or 0} deleted"
                     for s in snapshots)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
