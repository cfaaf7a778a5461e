"""What a rollback says of a load's rejected lines (quarantine.rejected_report): the
count, by reason only when the job counted them so, where they really are, and the
quarantine's first lines; never a place that does not exist."""

from __future__ import annotations

from twophase.gates.quarantine import Kept, rejected_report

KEPT = [Kept("not JSON", f"file:///in/part-{n}.jsonl", None, "{oops") for n in range(3)]


def test_a_job_with_its_own_rejects_folder_and_the_quarantine():
    said = rejected_report("p.run.1", {"rejected_lines": 3, "rejected_by_reason": {"not JSON": 3}},
                           {"rejects": "file:///data/rejects/load=1"}, KEPT, shown=2)
    assert said == [
        "rejected input lines: 3 (by reason: {'not JSON': 3})",
        "the job wrote them to file:///data/rejects/load=1",
        "the first 2 lines the quarantine kept (all of them: `python -m twophase show p.run.1 --rejected`):",
        "  file:///in/part-0.jsonl: not JSON: '{oops'",
        "  file:///in/part-1.jsonl: not JSON: '{oops'",
    ]


def test_a_job_without_reasons_or_a_rejects_folder_names_no_place_that_does_not_exist():
    said = rejected_report("p.run.1", {"rejected_lines": 3}, {}, KEPT[:1])
    assert said[0] == "rejected input lines: 3"
    assert not any("by reason" in s or "wrote them" in s or "folder" in s for s in said), said
    assert said[1].startswith("the first 1 lines the quarantine kept")


def test_rejected_lines_nothing_keeps_are_said_to_be_kept_nowhere():
    assert rejected_report("p.run.1", {"rejected_lines": 2}, {}, []) == [
        "rejected input lines: 2",
        "neither the quarantine nor a rejects location of the job keeps them (the job's Output returned no rejects)",
    ]


def test_audit_rows_in_the_quarantine_are_shown_without_rejected_lines():
    rows = [Kept("value_range(t.amount)", None, "amount -1 below 0", "{'amount': -1}")]
    said = rejected_report("p.run.1", {"rejected_lines": 0}, {}, rows)
    assert said == ["the first 1 lines the quarantine kept (all of them: `python -m twophase show p.run.1 --rejected`):",
                    "  ?: value_range(t.amount) (amount -1 below 0): \"{'amount': -1}\""]
    assert rejected_report("p.run.1", {}, {}, []) == []
