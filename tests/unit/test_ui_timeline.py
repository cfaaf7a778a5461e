"""A load's timeline (plugins/twophase_ui/timeline.py) and the SVG charts drawing it
(charts.py), from log rows made here: no server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from twophase.ids import load_id_for
from twophase.log import Load
from twophase.participants.iceberg import IcebergTarget
from twophase.participants.kafka import KafkaTarget
from twophase.participants.postgres import PostgresTarget
from twophase.protocol.states import State
from twophase.protocol.votes import Vote
from twophase.spec import LoadSpec
from twophase_ui import charts
from twophase_ui.timeline import commits, ordered_participants, spans, targets_of

T0 = datetime(2026, 11, 20, 3, 0, tzinfo=timezone.utc)
SPEC = LoadSpec(load_id=load_id_for("p", "r"), pipeline="p", run_id="r",
                targets=(PostgresTarget("s.t"), KafkaTarget("topic", key_column="k"), IcebergTarget("s.lake")))


def _load(state: State, at: dict[str, float], **columns) -> Load:
    """A load of SPEC whose timestamps are T0 + the seconds in `at`."""
    times = {name: T0 + timedelta(seconds=s) for name, s in at.items()}
    row = dict(load_id=SPEC.load_id, pipeline="p", run_id="r", state=state, decision=None, reason=None,
               participants=SPEC.to_log(), input={}, expected_rows=None, expected=None, metrics={},
               prepare_error=None, data_interval_start=None, data_interval_end=None, began_at=T0, prepared_at=None,
               decided_at=None, finished_at=None, updated_at=T0)
    return Load(**{**row, **times, **columns})


def test_commits_are_placed_back_to_back_in_commit_order_ending_when_the_commit_ended():
    load = _load(State.COMMITTED, {"prepared_at": 10, "exposed_at": 11, "decided_at": 12, "finished_at": 15},
                 decision="COMMIT", outcomes={"postgres": {"seconds": 0.5}, "kafka": {"seconds": 1.5},
                                              "iceberg:s.lake": {"seconds": 0.25}})
    order = ordered_participants(load, targets_of(load))
    assert order == ["kafka", "iceberg:s.lake", "postgres"]  # the likeliest to fail first, Postgres last
    placed = commits(load, order)
    at = lambda s: T0 + timedelta(seconds=s)  # noqa: E731
    assert placed == {"postgres": (at(14.5), at(15)), "iceberg:s.lake": (at(14.25), at(14.5)),
                      "kafka": (at(12.75), at(14.25))}
    drawn = {(s.lane, s.label): s for s in spans(load, {"postgres": None}, now=at(99))}
    assert (drawn[("Load", "prepare")].start, drawn[("Load", "prepare")].end) == (at(0), at(10))
    assert (drawn[("Load", "vote")].start, drawn[("Load", "vote")].end) == (at(10), at(12))
    assert (drawn[("Load", "commit")].start, drawn[("Load", "commit")].end) == (at(12), at(15))
    assert (drawn[("Exposure", "exposure window")].start, drawn[("Exposure", "exposure window")].end) == (at(11),
                                                                                                        at(15))
    assert drawn[("kafka", "commit")].estimated and not drawn[("Load", "commit")].estimated


def test_a_last_resource_commits_in_the_vote_and_holds_no_prepared_transaction():
    spec = LoadSpec(load_id=SPEC.load_id, pipeline="p", run_id="r", targets=SPEC.targets[:2],
                    last_resource="postgres", last_resource_why="max_prepared_transactions = 0")
    load = _load(State.COMMITTED, {"prepared_at": 10, "exposed_at": 11, "decided_at": 12, "finished_at": 14},
                 decision="COMMIT", participants=spec.to_log(),
                 outcomes={"postgres": {"seconds": 0.01}, "kafka": {"seconds": 1.0}})
    assert ordered_participants(load, targets_of(load)) == ["postgres", "kafka"]  # the last resource first
    votes = {p: Vote(p, True, 1, {}) for p in ("postgres", "kafka")}
    drawn = {(s.lane, s.label): s for s in spans(load, votes, now=T0)}
    decided = T0 + timedelta(seconds=12)
    assert (drawn[("postgres", "committed (last resource)")].start, drawn[("postgres", "staged")].end) == (decided,
                                                                                                         decided)
    assert ("postgres", "prepared transaction") not in drawn and ("postgres", "commit") not in drawn
    assert (drawn[("kafka", "commit")].start, drawn[("kafka", "commit")].end) == (T0 + timedelta(seconds=13),
                                                                                  T0 + timedelta(seconds=14))


def test_a_load_waiting_for_approval_waits_up_to_now_and_is_not_voting():
    now = T0 + timedelta(minutes=20)
    load = _load(State.PREPARED, {"prepared_at": 60},
                 approval={"asked_at": (T0 + timedelta(seconds=70)).isoformat(),
                           "timeout_at": (T0 + timedelta(hours=1)).isoformat()})
    drawn = {s.label: s for s in spans(load, {}, now=now)}
    assert set(drawn) == {"prepare", "approval wait"}
    wait = drawn["approval wait"]
    assert (wait.start, wait.end, wait.ongoing, wait.note) == (T0 + timedelta(seconds=70), now, True,
                                                               "waiting for a person")


def test_a_load_that_never_prepared_shows_its_prepare_cut_short_by_the_rollback():
    load = _load(State.ABORTED, {"decided_at": 5, "finished_at": 6}, decision="ABORT")
    drawn = [(s.label, (s.end - s.start).total_seconds()) for s in spans(load, {}, now=T0 + timedelta(hours=1))]
    assert drawn == [("prepare (never finished)", 5.0), ("rollback", 1.0)]


def test_the_timeline_svg_puts_each_bar_at_its_time_on_one_axis():
    bars = [charts.Bar("Load", "prepare", T0, T0 + timedelta(seconds=5), "#000", "prepare 5 s", "5.0 s"),
            charts.Bar("Load", "commit", T0 + timedelta(seconds=5), T0 + timedelta(seconds=10), "#000", "c", "5.0 s")]
    svg = charts.timeline(bars, T0, T0 + timedelta(seconds=10), "a load")
    half = charts.TIMELINE_PLOT / 2
    assert f'<rect x="{charts.TIMELINE_LABELS:.2f}" ' in svg and f'width="{half:.2f}"' in svg
    assert f'<rect x="{charts.TIMELINE_LABELS + half:.2f}" ' in svg
    assert "<title>prepare 5 s</title>" in svg and 'aria-label="a load"' in svg


@pytest.mark.parametrize("seconds, text", [(0.04, "0.0 s"), (9.94, "9.9 s"), (42, "42 s"), (245, "4 min 05 s"),
                                           (7380, "2 h 03 min")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert charts.seconds_text(seconds) == text
