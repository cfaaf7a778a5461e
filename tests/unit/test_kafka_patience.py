"""patiently retries passing coordinator errors, and only those, within its patience."""

import pytest
from confluent_kafka import KafkaError, KafkaException

from twophase.participants.kafka.client import patiently


def _failing(codes):
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= len(codes):
            raise KafkaException(KafkaError(codes[len(calls) - 1]))
        return "answer"
    return call, calls


def test_retries_a_coordinator_that_is_loading_or_moving():
    call, calls = _failing([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
    assert patiently(call) == "answer"
    assert len(calls) == 3


def test_retries_a_new_topic_whose_leader_is_not_there_yet():
    call, calls = _failing([KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION])
    assert patiently(call) == "answer"
    assert len(calls) == 3


def test_raises_other_errors_at_once():
    call, calls = _failing([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException):
        patiently(call)
    assert len(calls) == 1


def test_gives_up_when_patience_runs_out():
    call, calls = _failing([KafkaError.NOT_COORDINATOR] * 100)
    with pytest.raises(KafkaException):
        patiently(call, patience_s=0.5)
    assert 1 < len(calls) < 100


def test_the_timeout_is_a_setting_and_refuses_nonsense(monkeypatch):
    from twophase.participants.kafka.client import TIMEOUT_ENV, request_timeout_s

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert request_timeout_s() == 30
    monkeypatch.setenv(TIMEOUT_ENV, "2.5")
    assert request_timeout_s() == 2.5
    call, calls = _failing([KafkaError.NOT_COORDINATOR] * 100)
    monkeypatch.setenv(TIMEOUT_ENV, "0.25")  # patience: twice the timeout
    with pytest.raises(KafkaException):
        patiently(call)
    assert 1 < len(calls) < 100
    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=f"{TIMEOUT_ENV}={bad!r}: a number of seconds above 0"):
            request_timeout_s()
