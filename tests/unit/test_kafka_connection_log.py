"""ConnectionLog: an outage's librdkafka lines become two lines at most.

confluent_kafka 2.16 calls a client's `logger` as logger.log(level, "%s [%s] %s",
facility, client name, message), from poll(); these tests feed it lines exactly as
librdkafka wrote them during a real outage (a closed port), and then one real client.
"""

from __future__ import annotations

import logging
import socket

import pytest
from confluent_kafka import Producer

from twophase.errors import KafkaUnreachable
from twophase.participants.kafka import ConnectionLog, kafka_client

REFUSED = ("[thrd:127.0.0.1:59999/bootstrap]: 127.0.0.1:59999/bootstrap: Connect to ipv4#127.0.0.1:59999 failed: "
           "Connection refused (after 0ms in state CONNECT)")


def _feed(log: ConnectionLog, message: str, times: int, facility: str = "FAIL", level: int = 40) -> None:
    for _ in range(times):
        log.log(level, "%s [%s] %s", facility, "rdkafka#producer-1", message)


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "twophase.kafka"]


def test_first_failure_once_then_one_summary(caplog):
    caplog.set_level(logging.INFO)
    log = ConnectionLog("127.0.0.1:59999")
    _feed(log, REFUSED, 300)
    _feed(log, REFUSED.replace("CONNECT)", "CONNECT, 4 identical error(s) suppressed)"), 5)
    assert _lines(caplog) == [
        "Kafka at 127.0.0.1:59999: Connect to ipv4#127.0.0.1:59999 failed: Connection refused (further connection "
        "failures are counted, not logged, until the client closes)"]
    log.end("then it answered")
    [_, summary] = _lines(caplog)
    assert summary.startswith("Kafka at 127.0.0.1:59999: 305 failed connection attempts in ")
    assert summary.endswith(" s, then it answered; first: Connect to ipv4#127.0.0.1:59999 failed: Connection refused")
    log.end("client closed")  # no outage since: nothing more
    assert len(_lines(caplog)) == 2


def test_draining_at_the_end_gives_only_the_summary(caplog):
    log = ConnectionLog("b:1")
    log.quiet = True
    _feed(log, REFUSED, 50)
    log.quiet = False
    log.end("given up")
    assert len(_lines(caplog)) == 1 and "50 failed connection attempts" in _lines(caplog)[0]


def test_other_lines_pass_at_their_level(caplog):
    caplog.set_level(logging.INFO)
    log = ConnectionLog("b:1")
    _feed(log, "[thrd:app]: Configuration property x is a consumer property", 1, facility="CONFWARN", level=30)
    [record] = [r for r in caplog.records if r.name == "twophase.kafka"]
    assert record.levelno == 30 and "CONFWARN Configuration property x" in record.getMessage()
    assert log.failures == 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_client_against_a_closed_port(caplog, capfd):
    """No broker listens: the client's call fails with one readable line, the log has at
    most two lines for the outage, and librdkafka writes nothing to stderr."""
    bootstrap = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(KafkaUnreachable) as raised:
        with kafka_client(Producer, bootstrap) as producer:
            producer.list_topics(timeout=3)
    assert str(raised.value).startswith(f"Kafka at {bootstrap} is unreachable: Connect to ipv4#{bootstrap} failed: "
                                        "Connection refused")
    lines = _lines(caplog)
    assert len(lines) == 1 and "failed connection attempts in 3." in lines[0] and "given up" in lines[0], lines
    assert "Connection refused" not in capfd.readouterr().err
