"""A rollback that cannot finish, on the real stack: its staging topic deleted by hand after
prepare. Recovery keeps retrying it and, once it is stuck past its limit, exits 1 naming
the way out; the day stays taken (a new load of it is refused) until a person abandons the
rollback with `python -m twophase abandon`, after which the day loads again."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient

from support import make_df, make_spec
from twophase.protocol import coordinator
from twophase.protocol.coordinator import IntervalBusy
from twophase.protocol.states import State
from twophase.protocol.voting import MinRows

DAY = ("2026-11-20T00:00:00+00:00", "2026-11-21T00:00:00+00:00")


def twophase(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twophase", *args], capture_output=True, text=True, timeout=180,
                          env=os.environ)


def test_a_rollback_that_cannot_finish_holds_its_day_until_a_person_abandons_it(spark, txlog, conns, target,
                                                                                kafka_bootstrap):
    spec = dataclasses.replace(make_spec(target), data_interval=DAY)
    coordinator.begin(txlog, spec)
    coordinator.prepare(txlog, conns, spec.load_id, make_df(spark, 50))
    [staging] = [c["staging_topic"] for c in txlog.votes(spec.load_id)["kafka"].committable["topics"]]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([staging])[staging].result(60)
    decided = coordinator.vote(txlog, conns, spec.load_id, rules=[MinRows(51)])
    assert decided.state == State.ABORTING
    with pytest.raises(coordinator.RetryLater):
        coordinator.rollback(txlog, conns, spec.load_id)
    assert txlog.get(spec.load_id).state == State.ABORTING

    recovered = twophase("recover", "--pipeline", spec.pipeline, "--stuck-minutes", "0")
    assert recovered.returncode == 1, recovered.stdout + recovered.stderr
    assert f"{spec.load_id}: failed (ABORTING for" in recovered.stdout, recovered.stdout
    assert f"`python -m twophase abandon {spec.load_id} --reason ...` ends it" in recovered.stdout
    again = dataclasses.replace(make_spec(target, run_id=f"{target['topic']}-again"), data_interval=DAY)
    with pytest.raises(IntervalBusy):
        coordinator.begin(txlog, again)

    refused = twophase("abandon", spec.load_id)
    assert refused.returncode != 0 and "--reason" in refused.stderr, "a person says why"
    abandoned = twophase("abandon", spec.load_id, "--reason", "its staging topic was deleted by hand")
    assert abandoned.returncode == 0, abandoned.stderr
    load = txlog.get(spec.load_id)
    assert load.state == State.ABORTED and "abandoned by" in load.reason
    assert load.reason.endswith(": its staging topic was deleted by hand")
    assert twophase("abandon", spec.load_id, "--reason", "twice").returncode == 1, "only an ABORTING load"
    assert coordinator.begin(txlog, again).load_id == again.load_id, "the day is free again"
    coordinator.rollback(txlog, conns, again.load_id)
