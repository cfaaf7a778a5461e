"""Which errors of the commit copy mean its transaction outlived its timeout, for good
(kafka.participant.expired): the copy then fails with the timeout's advice and the load
aborts, instead of "retry later" for ever. Found in CI: the broker aborted a slow copy's
transaction, so its next produce request failed as fenced (a fatal error, not the broker's
"timed out")."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from twophase.participants.kafka.participant import expired

TIMED_OUT_TXN = KafkaError(KafkaError.INVALID_TXN_STATE, "Transaction timed out: aborted by the broker")
FENCED = KafkaError(KafkaError._FENCED, "This instance has been fenced by a newer instance", fatal=True)
CLIENT_TIMEOUT = KafkaError(KafkaError._TIMED_OUT, "Transaction commit timed out", retriable=True)
BROKER_DOWN = KafkaError(KafkaError._TRANSPORT, "Connection refused", retriable=True)


@pytest.mark.parametrize("err, outlived, is_expired", [
    (TIMED_OUT_TXN, False, True),     # the broker says so
    (FENCED, True, True),             # fenced after the timeout: the broker's abort bumped the epoch
    (FENCED, False, False),           # fenced before it: another instance of the copy, retry later
    (CLIENT_TIMEOUT, True, False),    # the client gave up waiting: the outcome is unknown, retry
    (BROKER_DOWN, True, False),       # retriable, whatever the time
])
def test_a_copy_error_is_the_timeout_for_good_only_when_the_broker_aborted_it(err, outlived, is_expired):
    assert expired(err, outlived) is is_expired
