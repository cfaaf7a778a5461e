"""The contract suite rejects participants that break the contract: run against each liar
of liars.py beside the honest in-memory participant, it fails for every liar, in the test
that names the broken rule, and passes for the honest one. A suite every liar passes
proves nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict

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


def test_the_suite_rejects_every_liar_in_the_test_of_its_rule_and_passes_the_honest_one():
    from liars import LIARS

    assert set(LIARS) == set(CAUGHT_BY)
    # One run of the suite over the honest memory participant and every liar (one process:
    # a second of pytest's start per liar is what this would cost otherwise).
    run = subprocess.run([sys.executable, "-m", "pytest", SUITE, "-k", "memory or liar-", "-q", "-n", "0",
                          "-p", "no:cacheprovider", "-p", "no:timeline", "-rf"],
                         cwd=ROOT, env={**os.environ, LIAR_ENV: "1"}, capture_output=True, text=True, timeout=300)
    failed = defaultdict(set)
    for test, params in re.findall(r"^FAILED \S+::(\w+)\[([^\]]*)\]", run.stdout, re.M):
        [kind] = re.findall(r"liar-[A-Za-z]+|memory", params)
        failed[kind].add(test)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "memory" not in failed, f"the honest participant failed: {sorted(failed['memory'])}"
    for liar, rule in CAUGHT_BY.items():
        assert rule in failed[f"liar-{liar}"], f"{liar} passed {rule}; it failed {sorted(failed[f'liar-{liar}'])}"
