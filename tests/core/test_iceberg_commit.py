"""The Iceberg target's commit: readers see a load whole or not at all, a replacement swaps
the interval's rows at one instant, and a commit whose outcome is unknown is resolved by
the snapshot log, never by deleting files.

Loads run through the coordinator into an Iceberg table of the stack's catalog (created by
the first load, partitioned by day) and a Postgres table; rows are read back by pyiceberg
scans of a catalog of the reader's own.
"""

from __future__ import annotations

import threading
import time

import pytest

from support import ICEBERG_COLUMNS, drop_iceberg_table, iceberg_leftovers, iceberg_table, make_df
from twophase.connections import Connections
from twophase.errors import ServerUnreachable
from twophase.ids import load_id_for
from twophase.ops import recovery
from twophase.participants.iceberg import LOAD_PROPERTY
from twophase.participants.iceberg import IcebergTarget
from twophase.participants.iceberg.catalog import staged_files
from twophase.participants.postgres import PostgresTarget
from twophase.protocol import coordinator
from twophase.protocol.states import State
from twophase.spec import LoadSpec

DAY = "2026-11-20"


@pytest.fixture
def lake(unique_name):
    """A fresh Iceberg table name (the first load creates it; purged after the test)."""
    name = f"core_tests.{unique_name}"
    yield name
    drop_iceberg_table(name)


@pytest.fixture
def lake_conns(pg_dsn, kafka_bootstrap, iceberg_catalog) -> Connections:
    return Connections(pg_dsn, kafka_bootstrap, iceberg_catalog=iceberg_catalog)


def spec_for(lake: str, table: str | None, run_id: str, replace: bool = False) -> LoadSpec:
    """A load into the Iceberg table, and into the Postgres table when one is named."""
    where = {"day": DAY} if replace else {}
    mode = "replace" if replace else "append"
    targets = [IcebergTarget(lake, mode, where, columns=ICEBERG_COLUMNS, partition_by=("day",))]
    if table:
        targets.append(PostgresTarget(table, mode, where))
    pipeline = lake.replace(".", "_")  # the test's own (recovery of it touches no other test's loads)
    return LoadSpec(load_id=load_id_for(pipeline, run_id), pipeline=pipeline, run_id=run_id, targets=targets)


def run(txlog, conns, spec, df) -> State:
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, df)
    decided = coordinator.vote(txlog, conns, spec.load_id)
    assert decided.state == State.COMMITTING, decided.reason
    coordinator.commit(txlog, conns, spec.load_id)
    return txlog.get(spec.load_id).state


def rows_by_load(lake: str) -> dict[str, int]:
    table = iceberg_table(lake)
    if table is None:
        return {}
    counts: dict[str, int] = {}
    for lid in table.scan(selected_fields=("load_id",)).to_arrow().column("load_id").to_pylist():
        counts[lid] = counts.get(lid, 0) + 1
    return counts


def snapshots_of(lake: str, load_id: str) -> list:
    return [s for s in iceberg_table(lake).snapshots() if s.summary.additional_properties.get(LOAD_PROPERTY) == load_id]


def test_a_polling_reader_sees_each_load_whole_and_a_replacement_at_one_instant(spark, txlog, lake, lake_conns,
                                                                                unique_name):
    """Three loads into the Iceberg table alone: two appends of day D, then one that
    replaces day D. A reader scanning the table all along sees, for each load, all of its
    rows or none, and never the replaced rows beside the replacement's."""
    sizes = [300, 500, 700]
    specs = [spec_for(lake, None, f"{unique_name}-{i}", replace=(i == 2)) for i in range(3)]
    seen: list[dict[str, int]] = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            seen.append(rows_by_load(lake))
            time.sleep(0.02)

    reader = threading.Thread(target=poll)
    run(txlog, lake_conns, specs[0], make_df(spark, sizes[0], day=DAY))  # creates the table first
    reader.start()
    try:
        for spec, size in zip(specs[1:], sizes[1:]):
            assert run(txlog, lake_conns, spec, make_df(spark, size, day=DAY)) == State.COMMITTED
            time.sleep(0.3)
    finally:
        stop.set()
        reader.join()

    expected = {s.load_id: n for s, n in zip(specs, sizes)}
    allowed = [{specs[0].load_id: 300}, {specs[0].load_id: 300, specs[1].load_id: 500}, {specs[2].load_id: 700}]
    assert len(seen) > 20, "the reader hardly ran"
    strays = [s for s in seen if s not in allowed]
    assert not strays, f"a reader saw part of a load, or a replacement beside what it replaced: {strays[:3]}"
    assert seen[-1] == allowed[-1] == rows_by_load(lake)
    assert {a.get(lid, 0) for a in seen for lid in expected} <= {0, *expected.values()}
    # The replacement's one catalog commit: a delete, then the append, both carrying its id.
    assert [s.summary.operation.value for s in snapshots_of(lake, specs[2].load_id)] == ["delete", "append"]


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "did-not-land"])
def test_a_commit_whose_outcome_is_unknown_is_resolved_by_the_snapshot_log(spark, txlog, lake, lake_conns, target,
                                                                            monkeypatch, landed):
    """The catalog commit raises CommitStateUnknownException, after the commit went through
    (landed) or before it did; the catalog also fails the participant's look at the snapshot
    log right after, so the outcome stays unknown. The load stays COMMITTING (retry later),
    no staged file is deleted; recovery re-drives the commit and exactly one snapshot carries
    the load, with every file of its vote."""
    from pyiceberg.exceptions import CommitStateUnknownException
    from pyiceberg.table import Transaction

    from twophase.participants.iceberg import participant as iceberg_participant

    spec = spec_for(lake, target["table"], target["topic"])
    real_commit, real_committed_by = Transaction.commit_transaction, iceberg_participant.committed_by
    faults = {"commit": 1, "look": 1}

    def commit_transaction(self):
        if faults["commit"]:
            faults["commit"] -= 1
            if landed:
                real_commit(self)
            raise CommitStateUnknownException("the catalog did not answer in time (test)")
        return real_commit(self)

    def committed_by(table, load_id):
        if faults["commit"] == 0 and faults["look"]:  # the look right after the unknown commit
            faults["look"] -= 1
            raise ConnectionError("the catalog is not answering (test)")
        return real_committed_by(table, load_id)

    monkeypatch.setattr(Transaction, "commit_transaction", commit_transaction)
    monkeypatch.setattr(iceberg_participant, "committed_by", committed_by)

    coordinator.begin(txlog, spec)
    votes = coordinator.prepare(txlog, lake_conns, spec.load_id, make_df(spark, 250, day=DAY))
    files = votes[f"iceberg:{lake}"].committable["files"]
    assert coordinator.vote(txlog, lake_conns, spec.load_id).state == State.COMMITTING
    with pytest.raises(coordinator.RetryLater, match="outcome unknown"):
        coordinator.commit(txlog, lake_conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.COMMITTING
    assert set(files) <= set(staged_files(votes[f"iceberg:{lake}"].committable["directory"])), \
        "a file of a commit that may have landed was deleted"
    assert len(snapshots_of(lake, spec.load_id)) == (1 if landed else 0)

    actions = recovery.recover(txlog, lake_conns, pipeline=spec.pipeline)
    assert [a.action for a in actions if a.load_id == spec.load_id] == ["commit re-driven"]
    assert txlog.get(spec.load_id).state == State.COMMITTED
    [snapshot] = snapshots_of(lake, spec.load_id)
    assert int(snapshot.summary["added-records"]) == 250
    assert rows_by_load(lake) == {spec.load_id: 250}
    assert set(iceberg_table(lake).inspect.files().column("file_path").to_pylist()) == set(files)
    assert iceberg_leftovers(lake, spec.load_id) == []


def test_the_sweep_after_an_abort_says_it_removed_the_aborts_mark(spark, txlog, lake, lake_conns, unique_name):
    """An abort deletes the staged files and leaves its mark (a late commit refuses); the
    sweep that removes the mark says so, not that it found orphan staged files."""
    spec = spec_for(lake, None, unique_name)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, lake_conns, spec.load_id, make_df(spark, 30, day=DAY))
    coordinator.rollback(txlog, lake_conns, spec.load_id, reason="rejected (test)")
    assert txlog.get(spec.load_id).state == State.ABORTED
    actions = [a for a in recovery.recover(txlog, lake_conns, pipeline=spec.pipeline) if a.load_id == spec.load_id]
    assert [a.action for a in actions] == ["abort's mark removed"], actions
    assert "_ABORTED of attempt 1 of iceberg table" in actions[0].detail
    assert iceberg_leftovers(lake, spec.load_id) == []
    assert recovery.recover(txlog, lake_conns, pipeline=spec.pipeline) == []


def test_spark_with_icebergs_own_runtime_reads_what_the_load_committed(spark, txlog, lake, lake_conns, unique_name):
    """An independent reader: `scripts/stack iceberg-sql` (Spark SQL with Iceberg's Java
    runtime, through Iceberg's JDBC catalog on the same database) counts the load's rows."""
    from support import stack

    spec = spec_for(lake, None, unique_name)
    assert run(txlog, lake_conns, spec, make_df(spark, 321, day=DAY)) == State.COMMITTED
    out = stack("iceberg-sql", "-S", "-e",
                f"select count(*), count(distinct customer_id), sum(orders) from twophase.{lake} "
                f"where load_id = '{spec.load_id}' and day = date '{DAY}'")
    expected = make_df(spark, 321, day=DAY).agg({"orders": "sum"}).first()[0]
    assert out.split() == ["321", "321", str(expected)], out


def test_a_catalog_that_does_not_answer_is_retry_later_in_one_line_and_never_shows_its_password(
        spark, txlog, lake, lake_conns, target):
    """The catalog's database on a port nobody listens on: prepare, then (with the catalog
    back for prepare and vote) commit raise RetryLater naming the catalog in one line,
    without its password; with the catalog back, the load commits whole."""
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    props = json.loads(lake_conns.iceberg_catalog)
    props["uri"] = f"postgresql+psycopg2://twophase:not-shown@127.0.0.1:{port}/twophase_iceberg"
    down = Connections(lake_conns.pg_dsn, lake_conns.kafka_bootstrap, iceberg_catalog=json.dumps(props))
    spec = spec_for(lake, target["table"], target["topic"])
    coordinator.begin(txlog, spec)

    with pytest.raises(ServerUnreachable) as raised:
        coordinator.prepare(txlog, down, spec.load_id, make_df(spark, 50, day=DAY))
    text = str(raised.value)
    assert "\n" not in text and f"Iceberg catalog 'twophase' (sql at 127.0.0.1:{port}) is unreachable" in text, text
    assert "not-shown" not in text and "Traceback" not in text
    assert txlog.get(spec.load_id).state == State.PREPARING

    coordinator.prepare(txlog, lake_conns, spec.load_id, make_df(spark, 50, day=DAY))
    assert coordinator.vote(txlog, lake_conns, spec.load_id).state == State.COMMITTING
    with pytest.raises(coordinator.RetryLater) as raised:
        coordinator.commit(txlog, down, spec.load_id)
    text = str(raised.value)
    assert "\n" not in text and f"(sql at 127.0.0.1:{port}) is unreachable" in text and "not-shown" not in text, text
    assert txlog.get(spec.load_id).state == State.COMMITTING and rows_by_load(lake) == {}

    coordinator.commit(txlog, lake_conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.COMMITTED and rows_by_load(lake) == {spec.load_id: 50}


def test_a_table_dropped_while_recovery_sweeps_the_catalog_is_passed_over(lake, iceberg_catalog, monkeypatch):
    """Recovery sweeps every table of the catalog; one dropped between its listing and the
    look at its snapshots (a user's drop, another pipeline's) is passed over, not the end
    of the sweep (seen once in CI: another test dropped its table mid-sweep)."""
    import pyarrow as pa

    from twophase.participants.iceberg import catalog_of
    from twophase.participants.iceberg import participant as iceberg
    from twophase.participants.iceberg.catalog import filesystem, staging_dir

    cat = catalog_of(iceberg_catalog)
    namespace, _ = lake.split(".")
    cat.create_namespace_if_not_exists(namespace)
    table = cat.create_table(lake, schema=pa.schema([("load_id", pa.string())]))
    crashed = load_id_for(lake.replace(".", "_"), "crashed")
    fs, path = filesystem(staging_dir(table, crashed))  # what a crashed prepare leaves
    fs.create_dir(path)
    with fs.open_output_stream(f"{path}/part-0.parquet") as out:
        out.write(b"staged")
    real = iceberg.committed_by

    def dropped_first(t, load_id):
        if ".".join(t.name()) == lake:
            cat.drop_table(lake)
        return real(t, load_id)

    monkeypatch.setattr(iceberg, "committed_by", dropped_first)
    try:
        swept = iceberg.IcebergParticipant.sweep(iceberg_catalog, lambda ids: {}, pipeline=lake.replace(".", "_"))
        assert [s for s in swept if s.load_id == crashed] == []
        assert catalog_of(iceberg_catalog).table_exists(lake) is False
    finally:
        folder_fs, folder = filesystem(table.location())  # a dropped table's files stay: the test's own
        folder_fs.delete_dir(folder)
