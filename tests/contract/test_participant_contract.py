"""The participant contract (twophase/participants/contract.py), checked once per implementation.

Each test runs against every harness of contract_harness (memory, postgres, kafka). A
step after staging runs on a fresh participant instance, as the coordinator's later tasks
do (another process, later). "Seen" is what a real reader counts (a separate Postgres
connection counting rows by load_id; a read_committed consumer counting records by header
load_id; the memory store's committed rows), checked against visible().

These loads are driven without a transaction log. A recovery sweep run meanwhile against
the same database by another suite (tests/core/test_crash_recovery.py, the recovery DAG)
takes them for orphans of unknown loads and discards their staging and prepared
transactions: run the Postgres tests of this suite while no recovery runs on the stack.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from contract_harness import ROWS
from twophase.participants.memory import LocalStage
from twophase.protocol.outcome import Kind
from twophase.protocol.states import State

def staged_and_prepared(h, rows=ROWS):
    """A load staged and prepared on one instance (as the prepare task does), then made
    ready on another (as the vote task does): (load id, the readied vote)."""
    lid = h.load_id()
    p = h.participant(lid)
    vote = h.prepare(p, h.stage(p, rows))
    assert vote.yes, vote.reason
    readied = h.participant(lid).ready(vote)
    assert readied.yes, readied.reason
    return lid, readied


def visible(h, lid) -> dict[str, int]:
    return h.participant(lid).visible([lid])[lid]


def assert_nothing_visible(h, lid):
    nothing = h.nothing(h.participant(lid))
    assert h.seen(lid) == nothing, "a real reader sees rows of the load"
    assert visible(h, lid) == nothing, "visible() reports rows of the load"


# 1 -------------------------------------------------------------------------------------------


def test_nothing_visible_before_commit_and_visible_agrees_with_readers_after(harness):
    h = harness
    lid, other = h.load_id(), h.load_id()
    p = h.participant(lid)
    staged = h.stage(p)
    assert_nothing_visible(h, lid)  # staged
    vote = h.prepare(p, staged)
    assert vote.yes, vote.reason
    assert_nothing_visible(h, lid)  # prepared
    assert h.held(lid) == [], "prepare left something held on the server; only ready may take it"
    vote = h.participant(lid).ready(vote)
    assert vote.yes, vote.reason
    assert bool(h.held(lid)) == h.holds_when_ready, h.held(lid)
    assert_nothing_visible(h, lid)  # ready

    done = h.participant(lid).commit(vote)
    assert done.kind == Kind.DONE
    everything = h.all_rows(p)
    assert h.seen(lid) == everything
    # the outcome says what the commit made visible, per target: what readers see
    assert done.participant == p.name and done.visible == everything == vote.counts, done.visible
    # visible() names every load asked about and every target, 0 where nothing is visible
    assert h.participant(lid).visible([lid, other]) == {lid: everything, other: h.nothing(p)}


# 2 -------------------------------------------------------------------------------------------


def test_prepare_votes_yes_with_the_rows_staged_per_target(harness):
    h = harness
    lid = h.load_id()
    p = h.participant(lid)
    staged = h.stage(p)
    assert staged.expected == h.all_rows(p)
    vote = h.prepare(p, staged)
    assert vote.yes, vote.reason
    assert vote.participant == p.name
    assert vote.counts == h.all_rows(p)
    assert vote.count == ROWS * len(p.targets)
    assert vote.summary


def test_prepare_votes_no_when_fewer_rows_were_expected_than_staged(harness):
    h = harness
    lid = h.load_id()
    p = h.participant(lid)
    staged = h.stage(p)
    vote = h.prepare(p, staged, expected={t: n - 1 for t, n in staged.expected.items()})  # never raises
    assert not vote.yes
    assert vote.reason
    assert_nothing_visible(h, lid)
    assert h.participant(lid).abort(vote).ok  # a no vote is still discarded by abort
    assert_nothing_visible(h, lid)


# 3 -------------------------------------------------------------------------------------------


def test_commit_is_idempotent_on_fresh_instances(harness):
    h = harness
    lid, vote = staged_and_prepared(h)
    assert h.participant(lid).commit(vote).kind == Kind.DONE
    again = h.participant(lid).commit(vote)
    assert again.kind == Kind.ALREADY_DONE, again.describe()
    everything = h.all_rows(h.participant(lid))
    assert again.visible == everything, "a repeated commit must say what readers see, as the first did"
    assert h.seen(lid) == everything, "a repeated commit duplicated or lost rows"
    assert visible(h, lid) == everything


@pytest.mark.parametrize("after", ["stage", "prepare"])
def test_abort_is_idempotent_on_fresh_instances(harness, after):
    h = harness
    lid = h.load_id()
    p = h.participant(lid)
    staged = h.stage(p)
    vote = h.prepare(p, staged) if after == "prepare" else None
    first = h.participant(lid).abort(vote)
    assert first.kind == Kind.DONE, first.describe()
    again = h.participant(lid).abort(vote)
    assert again.kind in (Kind.DONE, Kind.ALREADY_DONE), again.describe()
    assert_nothing_visible(h, lid)
    assert h.leftovers(lid) == [], "abort left staging behind"


def test_clean_up_after_commit_leaves_nothing_and_keeps_the_data(harness):
    h = harness
    lid, vote = staged_and_prepared(h)
    assert h.participant(lid).commit(vote).kind == Kind.DONE
    assert h.participant(lid).clean_up(vote) == ""
    assert h.participant(lid).clean_up(vote) == "", "a repeated clean_up left something"
    assert h.leftovers(lid) == [], "clean_up left staging behind"
    everything = h.all_rows(h.participant(lid))
    assert h.seen(lid) == everything
    assert visible(h, lid) == everything


# 4 -------------------------------------------------------------------------------------------


def test_commit_after_abort_fails_and_never_acts(harness):
    h = harness
    lid, vote = staged_and_prepared(h)
    assert h.participant(lid).abort(vote).kind == Kind.DONE
    assert h.held(lid) == [], "abort of a readied load left something held on the server"
    refused = h.participant(lid).commit(vote)
    assert refused.kind == Kind.FAILED, refused.describe()
    assert refused.reason
    assert_nothing_visible(h, lid)
    again = h.participant(lid).commit(vote)
    assert again.kind == Kind.FAILED, f"FAILED must stay FAILED: {again.describe()}"
    assert_nothing_visible(h, lid)


def test_two_drivers_committing_at_once_make_the_load_visible_once(harness):
    """The coordinator lets one driver at a time commit (its lease), but a driver that
    stalled past its lease may still be committing when the next one starts: the
    participant's own fencing must keep the load from landing twice."""
    h = harness
    lid, vote = staged_and_prepared(h)
    start, outcomes = threading.Barrier(2), []

    def drive():
        p = h.participant(lid)
        start.wait()
        outcomes.append(p.commit(vote))

    drivers = [threading.Thread(target=drive) for _ in range(2)]
    [d.start() for d in drivers]
    [d.join(120) for d in drivers]
    assert len(outcomes) == 2 and any(o.ok for o in outcomes), [o.describe() for o in outcomes]
    assert all(o.kind != Kind.FAILED for o in outcomes), [o.describe() for o in outcomes]
    everything = h.all_rows(h.participant(lid))
    assert h.seen(lid) == everything, "two drivers made the load visible twice (or lost it)"
    settled = h.participant(lid).commit(vote)
    assert settled.kind == Kind.ALREADY_DONE and settled.visible == everything, settled.describe()


def test_abort_after_commit_fails_and_the_data_stays(harness):
    h = harness
    lid, vote = staged_and_prepared(h)
    assert h.participant(lid).commit(vote).kind == Kind.DONE
    refused = h.participant(lid).abort(vote)
    assert refused.kind == Kind.FAILED, refused.describe()
    assert refused.reason
    everything = h.all_rows(h.participant(lid))
    assert h.seen(lid) == everything
    assert visible(h, lid) == everything


# 5 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("first_attempt", ["dies_midway", "staged_then_lost"])
def test_a_retried_staging_attempt_leaves_no_duplicate(harness, first_attempt):
    """Partition 0's first attempt writes its first batch and dies (dies_midway), or
    stages all of it and dies before reporting (staged_then_lost, as a lost executor):
    a second attempt writes the whole partition; only it reports."""
    h = harness
    lid = h.load_id()
    p = h.participant(lid)
    knob = {"crash_midway": frozenset({0})} if first_attempt == "dies_midway" else {"crash_staged": frozenset({0})}
    staged = h.stage(p, attempts=LocalStage(**knob))
    tries = [(part, outcome) for part, _, outcome in staged.attempts if part == 0]
    assert len(tries) == 2 and tries[0][1].startswith("failed") and tries[1][1] == "ok", staged.attempts
    assert staged.expected == h.all_rows(p)

    vote = h.prepare(p, staged)
    assert vote.yes, vote.reason
    assert vote.counts == h.all_rows(p)
    assert_nothing_visible(h, lid)
    vote = h.participant(lid).ready(vote)
    assert vote.yes, vote.reason
    assert h.participant(lid).commit(vote).kind == Kind.DONE
    everything = h.all_rows(p)
    assert h.seen(lid) == everything, "the failed attempt's rows became visible too"
    assert visible(h, lid) == everything


# 5b ------------------------------------------------------------------------------------------


RETRY_ROWS = ROWS - 7  # the retry's rows differ in number: what readers see tells which attempt committed


@pytest.mark.parametrize("zombie", ["prepared before the retry staged", "staged while the retry staged",
                                    "staged and prepared after the commit, then died"])
def test_two_prepare_attempts_at_once_only_the_voted_one_commits(harness, zombie):
    """Airflow retried the prepare task while the first attempt's Spark application (a
    zombie: its submitting process died) still ran. The retry (attempt 2) votes and
    commits; the zombie (attempt 1) stages under names of its own, and what it staged or
    prepared never counts: it discards it when the log fences it, or, dead, the latest
    attempt's hooks or the sweep do."""
    h = harness
    lid = h.load_id()
    first = h.participant(lid, attempt=1)
    if zombie == "prepared before the retry staged":
        h.prepare(first, h.stage(first))
    retry = h.participant(lid, attempt=2)
    staged = h.stage(retry, RETRY_ROWS)
    if zombie == "staged while the retry staged":
        h.stage(first)  # its records, files or rows land between the retry's staging and its prepare
    vote = h.prepare(h.participant(lid, attempt=2), staged)
    assert vote.yes, vote.reason
    assert vote.counts == h.all_rows(retry, RETRY_ROWS)
    if zombie != "staged and prepared after the commit, then died":
        assert h.participant(lid, attempt=1).discard() == ""  # fenced by the log: it drops its own
    assert_nothing_visible(h, lid)

    vote = h.participant(lid, attempt=2).ready(vote)
    assert vote.yes, vote.reason
    assert h.participant(lid, attempt=2).commit(vote).kind == Kind.DONE
    assert h.participant(lid, attempt=2).clean_up(vote) == ""
    retried = h.all_rows(retry, RETRY_ROWS)
    assert h.seen(lid) == retried and visible(h, lid) == retried
    assert h.leftovers(lid) == []

    if zombie == "staged and prepared after the commit, then died":
        late = h.participant(lid, attempt=1)
        try:
            h.prepare(late, h.stage(late))
        except Exception:  # noqa: BLE001 - a kind may refuse outright (the load is committed there)
            pass
        h.sweep(lambda load_ids: {x: State.COMMITTED if x == lid else State.PREPARED for x in load_ids})
        assert h.leftovers(lid) == [], "the sweep left the dead zombie's staging"
    assert h.seen(lid) == retried and visible(h, lid) == retried


# 6 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("log_says", ["unknown", "ABORTED"])
@pytest.mark.parametrize("crash_after", ["stage", "prepare", "ready"])
def test_orphans_of_a_crashed_load_are_found_and_swept(harness, crash_after, log_says):
    """A load crashes (its instance is dropped) after staging or after preparing; the log
    does not know it, or says ABORTED. sweep() discards its staging and prepared data, and
    leaves a bystander load the log says is PREPARED alone."""
    h = harness
    bystander, bystander_vote = staged_and_prepared(h)
    lid = h.load_id()
    p = h.participant(lid)
    staged = h.stage(p)
    if crash_after in ("prepare", "ready"):
        vote = h.prepare(p, staged)
        assert vote.yes
        if crash_after == "ready":
            assert h.participant(lid).ready(vote).yes
    del p, staged  # the crash: nothing of the process survives

    left, bystander_left = h.leftovers(lid), h.leftovers(bystander)
    if h.sweeps_staging:
        assert left, "the crashed load left nothing to sweep?"
    asked: list[set] = []

    def state_of(load_ids):
        asked.append(set(load_ids))
        states = {x: State.PREPARED for x in load_ids if x != lid}  # other loads (other tests too) are live
        if log_says == "ABORTED" and lid in load_ids:
            states[lid] = State.ABORTED
        return states

    swept = h.sweep(state_of)
    mine = [s for s in swept if s.load_id == lid]
    if h.sweeps_staging:
        assert mine, f"sweep found none of {left}; swept {swept}"
        assert all(s.action for s in mine)
        assert lid in set().union(*asked), "sweep did not ask the log about the crashed load"
    else:
        assert swept == []
    assert [s for s in swept if s.load_id != lid] == [], "sweep discarded another load's staging"
    assert h.leftovers(lid) == []
    assert_nothing_visible(h, lid)
    assert [s for s in h.sweep(state_of) if s.load_id == lid] == [], "a second sweep found the load again"

    # The bystander is untouched and still commits whole.
    assert h.leftovers(bystander) == bystander_left
    bystander_vote = h.participant(bystander).ready(bystander_vote)
    assert bystander_vote.yes, bystander_vote.reason
    assert h.participant(bystander).commit(bystander_vote).kind == Kind.DONE
    assert h.seen(bystander) == h.all_rows(h.participant(bystander))


def test_a_sweep_leaves_every_load_in_flight_whole_whatever_its_state(harness):
    """Loads the log says are PREPARING, PREPARED, COMMITTING or ABORTING are in flight:
    their own steps still use what they staged and readied. A sweep beside them discards
    only the crashed load the log does not know."""
    h = harness
    states = (State.PREPARING, State.PREPARED, State.COMMITTING, State.ABORTING)
    in_flight = {state: staged_and_prepared(h) for state in states}
    left = {state: h.leftovers(lid) for state, (lid, _) in in_flight.items()}
    held = {state: h.held(lid) for state, (lid, _) in in_flight.items()}
    crashed = h.load_id()
    p = h.participant(crashed)
    assert h.prepare(p, h.stage(p)).yes
    del p
    logged = {lid: state for state, (lid, _) in in_flight.items()}

    swept = h.sweep(lambda load_ids: {x: logged.get(x, State.PREPARED) for x in load_ids if x != crashed})
    assert {s.load_id for s in swept} <= {crashed}, f"a sweep discarded a load in flight: {swept}"
    for state, (lid, vote) in in_flight.items():
        assert h.leftovers(lid) == left[state] and h.held(lid) == held[state], f"the {state} load was touched"
    for state, (lid, vote) in in_flight.items():  # each still ends as its state says it will
        if state == State.ABORTING:
            assert h.participant(lid).abort(vote).ok
            assert_nothing_visible(h, lid)
        else:
            assert h.participant(lid).commit(vote).kind == Kind.DONE, state
            assert h.seen(lid) == h.all_rows(h.participant(lid))


def test_a_sweep_for_one_pipeline_leaves_every_other_pipelines_orphans(harness):
    """Recovery of one pipeline (`recover --pipeline`) sweeps only that pipeline's orphans:
    a crashed load the log does not know is left whole by a sweep for another pipeline,
    and discarded by one for its own. Its pipeline is this test's alone: a sweep of it
    sweeps every load the log does not know, and the other contract tests (of pipeline
    `contract`, on other workers) have loads on the same servers and catalog."""
    h = harness
    pipeline = f"contract_{uuid.uuid4().hex[:12]}"
    lid = h.load_id(pipeline)
    bystander, bystander_vote = staged_and_prepared(h)  # of pipeline `contract`
    bystander_left = h.leftovers(bystander)
    p = h.participant(lid)
    assert h.prepare(p, h.stage(p)).yes
    del p  # the crash
    left = h.leftovers(lid)
    unknown = lambda load_ids: {}  # noqa: E731 (the log knows none of them)

    assert [s for s in h.sweep(unknown, pipeline=f"{pipeline}_other") if s.load_id == lid] == []
    assert [s for s in h.sweep(unknown, pipeline=pipeline[:-1]) if s.load_id == lid] == [], "a prefix is not a pipeline"
    assert h.leftovers(lid) == left
    swept = h.sweep(unknown, pipeline=pipeline)
    assert [s for s in swept if s.load_id != lid] == [], "a sweep of one pipeline discarded another's load"
    assert bool(swept) == h.sweeps_staging and h.leftovers(lid) == []
    assert_nothing_visible(h, lid)
    assert h.leftovers(bystander) == bystander_left
    assert h.participant(bystander).ready(bystander_vote).yes


# 7 -------------------------------------------------------------------------------------------


def test_ready_is_repeatable_and_a_load_whose_prepared_data_is_lost_cannot_commit(harness):
    h = harness
    lid, vote = staged_and_prepared(h)
    again = h.participant(lid).ready(vote)
    assert again.yes, f"ready is not repeatable: {again.reason}"
    assert again.counts == vote.counts
    assert_nothing_visible(h, lid)

    h.lose_prepared(lid, again)
    refused = h.participant(lid).commit(again)
    assert refused.kind == Kind.FAILED, refused.describe()
    assert_nothing_visible(h, lid)
    assert h.participant(lid).abort(again).ok


def test_ready_votes_no_naming_staging_lost_while_the_load_waited(harness):
    """Between prepare and the vote a load may wait for hours (an audit, an approval):
    what a server restart or retention took meanwhile makes ready vote no, naming it,
    and abort still discards the rest."""
    h = harness
    lid = h.load_id()
    p = h.participant(lid)
    vote = h.prepare(p, h.stage(p))
    assert vote.yes, vote.reason
    h.lose_staged(lid, vote)
    readied = h.participant(lid).ready(vote)
    assert not readied.yes, "ready did not notice the staging is gone"
    assert readied.reason
    assert h.held(lid) == [], "a ready that voted no left something held"
    assert h.participant(lid).abort(readied).ok
    assert_nothing_visible(h, lid)
    assert h.leftovers(lid) == []


# 8 -------------------------------------------------------------------------------------------


def test_the_audit_reads_every_targets_staged_rows_where_they_were_staged(harness):
    """staged_rows(): between prepare and vote, read-only, holding nothing, all the rows."""
    h = harness
    lid = h.load_id()
    p = h.participant(lid)
    vote = h.prepare(p, h.stage(p))
    assert vote.yes, vote.reason
    for target in p.targets:
        rows = h.participant(lid).staged_rows(vote, target)
        assert rows is not None, f"{h.kind} cannot read {target}'s staged rows"
        table = rows.arrow()
        assert rows.count() == table.num_rows == ROWS
        column = table.column_names[0]
        assert rows.nulls(column) == table.column(column).null_count
        assert rows.duplicates(tuple(table.column_names)) == 0
    assert h.held(lid) == []
    assert_nothing_visible(h, lid)
    readied = h.participant(lid).ready(vote)
    assert readied.yes, readied.reason
    assert h.participant(lid).commit(readied).kind == Kind.DONE
