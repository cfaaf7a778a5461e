"""The contract suite rejects participants that break the contract: run against each liar
of liars.py (in place of the honest in-memory participant), it fails, and it fails in the
test that names the broken rule. A suite every liar passes proves nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from contract_harness import LIAR_ENV
from support import ROOT

pytestmark = pytest.mark.serverless
SUITE = "tests/contract/test_participant_contract.py"

CAUGHT_BY = {
    "CheckThenActCommit": "test_two_drivers_committing_at_once_make_the_load_visible_once",
    "EagerSweep": "test_a_sweep_leaves_every_load_in_flight_whole_whatever_its_state",
    "AbortLeavesItHeld": "test_commit_after_abort_fails_and_never_acts",
    "CommitsAfterAbort": "test_commit_after_abort_fails_and_never_acts",
    "VotesWhatSparkSaid": "test_prepare_votes_no_when_fewer_rows_were_expected_than_staged",
    "DoneWithNothing": "test_nothing_visible_before_commit_and_visible_agrees_with_readers_after",
}


def run_suite(liar: str | None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != LIAR_ENV}
    if liar:
        env[LIAR_ENV] = liar
    return subprocess.run([sys.executable, "-m", "pytest", SUITE, "-k", "memory", "-q", "-n", "0",
                           "-p", "no:cacheprovider", "-p", "no:timeline", "-rf"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_every_liar_has_its_rule():
    from liars import LIARS

    assert set(LIARS) == set(CAUGHT_BY)


@pytest.mark.parametrize("liar", sorted(CAUGHT_BY))
def test_the_suite_rejects_the_liar(liar):
    run = run_suite(liar)
    assert run.returncode == 1, f"the contract suite passed a participant that breaks it ({liar}):\n{run.stdout[-3000:]}"
    assert f"FAILED {SUITE}::{CAUGHT_BY[liar]}" in run.stdout, run.stdout[-4000:]


def test_the_honest_participant_passes():
    run = run_suite(None)
    assert run.returncode == 0, run.stdout[-3000:]
