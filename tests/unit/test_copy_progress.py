"""The commit copy says how far it got, and plainly what it waits on when it stalls.

A fake consumer answers the metadata request (pure logic: which partitions have no leader);
the clock is the real one, with the thresholds set to 0."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from twophase.participants.kafka import copy


class _Consumer:
    def __init__(self, leaders: dict[str, dict[int, int]]):
        self.leaders = leaders

    def list_topics(self, name, timeout):
        partitions = {p: SimpleNamespace(leader=leader) for p, leader in self.leaders[name].items()}
        return SimpleNamespace(topics={name: SimpleNamespace(partitions=partitions)})


@pytest.fixture
def at_once(monkeypatch):
    monkeypatch.setattr(copy, "PROGRESS_EVERY_S", 0)
    monkeypatch.setattr(copy, "STALLED_AFTER_S", 0)


def test_a_stalled_copy_names_the_partitions_without_a_leader(at_once, caplog):
    consumer = _Consumer({"t.twophase-staging": {0: 1, 1: -1}, "t": {0: -1, 1: 2}})
    progress = copy._Progress(consumer, ["t.twophase-staging", "t"], expected=1000)
    with caplog.at_level(logging.INFO, logger="twophase.kafka.copy"):
        progress.tick(0, [("t.twophase-staging", 0), ("t.twophase-staging", 1)])
    said = [r.getMessage() for r in caplog.records]
    assert "commit copy: 0 of 1000 records copied in 0 s; 2 staging partitions to go" in said
    [warning] = [m for m in said if "no record copied" in m]
    assert "waiting on partitions without a leader: t.twophase-staging[1], t[0] (a broker down?" in warning


def test_a_stalled_copy_with_every_leader_names_what_it_still_reads(at_once, caplog):
    consumer = _Consumer({"s": {0: 1, 1: 1}, "t": {0: 1}})
    progress = copy._Progress(consumer, ["s", "t"], expected=10)
    with caplog.at_level(logging.WARNING, logger="twophase.kafka.copy"):
        progress.tick(4, [("s", 1)])
    assert [r.getMessage() for r in caplog.records][-1].endswith("(4 of 10 so far); waiting on s[1]")


def test_a_copy_that_moves_is_not_called_stalled(monkeypatch, caplog):
    monkeypatch.setattr(copy, "PROGRESS_EVERY_S", 3600)
    monkeypatch.setattr(copy, "STALLED_AFTER_S", 3600)
    progress = copy._Progress(_Consumer({}), [], expected=10)
    with caplog.at_level(logging.INFO, logger="twophase.kafka.copy"):
        progress.tick(5, [("s", 0)])
    assert caplog.records == []
