"""The vote's pure logic."""

from dataclasses import replace

import pytest

from twophase.protocol.outcome import Kind, Outcome
from twophase.protocol.votes import Vote
from twophase.protocol.voting import (MaxRejectedShare, MaxSkippedFiles, MinRows, commit_problems, owned, reasons_to_abort)

PLANNED = {"postgres": ("shop.orders", "shop.daily"), "kafka": ("orders",)}
EXPECTED = {"postgres": 10, "kafka": 10}  # votes logged without per-target counts: one per participant
PER_TARGET = {"shop.orders": 10, "shop.daily": 4, "orders": 10}


def votes(pg=(True, 10), kafka=(True, 10)):
    return {"postgres": Vote("postgres", pg[0], pg[1], reason="" if pg[0] else "pg said no"),
            "kafka": Vote("kafka", kafka[0], kafka[1], reason="" if kafka[0] else "kafka said no")}


def test_all_yes_and_counts_agree_commits():
    assert reasons_to_abort(PLANNED, votes(), EXPECTED) == []


def test_a_no_vote_aborts_with_its_reason():
    assert reasons_to_abort(PLANNED, votes(kafka=(False, 10)), EXPECTED) == ["kafka voted no: kafka said no"]


def test_a_missing_vote_aborts():
    v = votes()
    del v["kafka"]
    assert reasons_to_abort(PLANNED, v, EXPECTED) == ["kafka did not vote"]


def test_an_unplanned_vote_aborts():
    v = {**votes(), "s3": Vote("s3", True, 10)}
    assert reasons_to_abort(PLANNED, v, EXPECTED) == ["unexpected vote from s3, which is not a planned participant",
                                                      "s3 voted yes without its rows per target"]


def test_counts_must_match_what_spark_computed():
    assert reasons_to_abort(PLANNED, votes(pg=(True, 9)), EXPECTED) == ["postgres staged 9 for postgres, but Spark computed 10"]


def test_unknown_spark_count_aborts():
    assert reasons_to_abort(PLANNED, votes(), None) == ["Spark's row count was not recorded"]


def claims(**changes) -> dict[str, Vote]:
    """Sound votes with per-target counts, each changed as given (a field: its value)."""
    sound = {"postgres": Vote("postgres", True, 14, counts={"shop.orders": 10, "shop.daily": 4}),
             "kafka": Vote("kafka", True, 10, counts={"orders": 10})}
    return {name: replace(vote, **changes.get(name, {})) for name, vote in sound.items()}


@pytest.mark.parametrize("changes, reasons", [
    ({}, []),
    ({"postgres": {"participant": "kafka"}}, ["the vote of postgres names another participant, kafka"]),
    ({"postgres": {"count": 10, "counts": {"shop.orders": 10}}},
     ["postgres voted yes but counted nothing for shop.daily"]),
    ({"kafka": {"count": 20, "counts": {"orders": 10, "shop.daily": 10}}},
     ["kafka counted rows for shop.daily, which it does not write"]),
    ({"postgres": {"count": 20}}, ["postgres's rows per target add up to 14, but its total is 20"]),
    ({"postgres": {"count": 13, "counts": {"shop.orders": 9, "shop.daily": 4}}},
     ["postgres staged 9 for shop.orders, but Spark computed 10"]),
    ({"kafka": {"counts": {}}}, ["kafka voted yes without its rows per target"]),
])
def test_a_yes_vote_is_held_to_every_claim_it_makes(changes, reasons):
    """A yes vote names its own participant, counts exactly its targets, adds up to its
    total, and matches what Spark computed target by target: a vote that leaves a target
    out would commit that target with whatever it holds."""
    assert reasons_to_abort(PLANNED, claims(**changes), PER_TARGET) == reasons


def test_a_load_of_the_old_form_compares_each_total_even_of_a_vote_with_counts():
    """A load logged before targets had names (Spark's count per participant), readied by
    this release (its readied votes carry per-target counts): each total is compared."""
    assert reasons_to_abort(PLANNED, claims(), {"postgres": 14, "kafka": 10}) == []
    assert reasons_to_abort(PLANNED, claims(), {"postgres": 13, "kafka": 10}) == [
        "postgres staged 14 for postgres, but Spark computed 13"]


def test_a_vote_under_another_name_is_owned_as_a_no():
    liar = Vote("kafka", True, 10, committable={"gid": "g"}, counts={"orders": 10})
    kept = owned(liar, "postgres")
    assert (kept.participant, kept.yes, kept.committable) == ("postgres", False, {"gid": "g"})
    assert kept.reason == "its vote names another participant, kafka"
    assert owned(liar, "kafka") is liar


def test_a_commit_of_a_vote_of_the_old_form_is_compared_by_its_total():
    """A vote logged before targets had names has a total alone: what the commit made
    visible is compared with it, under whatever names the participant gives."""
    old = Vote("postgres", True, 14)
    assert commit_problems(old, Outcome("postgres", Kind.ALREADY_DONE, visible={"postgres": 14})) == []
    assert commit_problems(old, Outcome("postgres", Kind.DONE, visible={"postgres": 13})) == [
        "postgres committed 13, but voted 14"]
    assert commit_problems(old, Outcome("postgres", Kind.DONE)) == [
        "postgres committed nothing it could count, but voted 14"]


def test_quality_rules_run_only_when_votes_are_sound():
    assert reasons_to_abort(PLANNED, votes(), EXPECTED, [MinRows(11)]) == [
        "quality gate: 10 rows, below the minimum of 11"]
    assert reasons_to_abort(PLANNED, votes(), EXPECTED, [MinRows(10)]) == []
    assert reasons_to_abort(PLANNED, votes(pg=(False, 10)), EXPECTED, [MinRows(11)]) == ["postgres voted no: pg said no"]


@pytest.mark.parametrize("metrics, reason", [
    ({"input_lines": 100, "rejected_lines": 5}, None),
    ({"input_lines": 100, "rejected_lines": 6},
     "quality gate: 6 of 100 input lines rejected (6.00%), above the maximum of 5.00%"),
    ({"input_lines": 0, "rejected_lines": 0}, None),
    ({}, "quality gate: the job reported no input_lines and rejected_lines, "
         "so the maximum rejected share of 5.00% cannot be checked"),
])
def test_max_rejected_share(metrics, reason):
    assert MaxRejectedShare(0.05)(10, metrics, {}) == reason


def test_max_rejected_share_of_one_is_off():
    assert MaxRejectedShare(1.0)(10, {}, {}) is None


def test_rules_read_the_jobs_metrics():
    metrics = {"input_lines": 10, "rejected_lines": 9}
    assert reasons_to_abort(PLANNED, votes(), EXPECTED, [MaxRejectedShare(0.5)], metrics) == [
        "quality gate: 9 of 10 input lines rejected (90.00%), above the maximum of 50.00%"]


def test_unread_input_files_abort_above_the_gate_naming_them():
    metrics = {"skipped_files": 4, "skipped_paths": [{"path": f"_p{i}.jsonl", "bytes": 10 + i, "why": "hidden name"}
                                                     for i in range(4)]}
    [reason] = reasons_to_abort(PLANNED, votes(), EXPECTED, [MaxSkippedFiles(0)], metrics)
    assert reason == ("quality gate: 4 input files were not read, above the maximum of 0: _p0.jsonl (10 bytes: hidden "
                      "name), _p1.jsonl (11 bytes: hidden name), _p2.jsonl (12 bytes: hidden name) and 1 more")
    assert reasons_to_abort(PLANNED, votes(), EXPECTED, [MaxSkippedFiles(4)], metrics) == []
    assert reasons_to_abort(PLANNED, votes(), EXPECTED, [MaxSkippedFiles(0)], {"skipped_files": 0}) == []
