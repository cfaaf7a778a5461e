"""errors.root_cause finds the innermost meaningful exception, on real exception texts.

The texts in root_cause_texts/ were captured from real failing prepares (tests/core
style: the stack's Postgres and Kafka, a local Spark session): str() of py4j's
Py4JJavaError, and the description plus JVM stack trace of pyspark's PythonException.
Their first lines say where each came from. No server is needed here.
"""

from __future__ import annotations

from pathlib import Path

import psycopg2
import pytest
from confluent_kafka import KafkaError, KafkaException

from twophase.errors import MAX_LENGTH, KafkaUnreachable, PostgresUnreachable, one_line, root_cause, root_cause_of_text
from twophase.server_errors import kafka_unreachable, postgres_unreachable, servers

TEXTS = Path(__file__).with_name("root_cause_texts")


def _captured(name: str) -> str:
    lines = (TEXTS / f"{name}.txt").read_text().splitlines(keepends=True)
    class_name = lines[1].removeprefix("# class:").strip()
    return root_cause_of_text(class_name, "".join(lines[2:]))


@pytest.mark.parametrize("name, expected", [
    # JVM: the file vanished between listing and reading; Spark's own message is two
    # wrappers up (Py4JJavaError "An error occurred while calling o476.collectToPython",
    # SparkException [FAILED_READ_FILE.FILE_NOT_EXIST]).
    ("vanished_file_staging",
     "FileNotFoundException: File file:/tmp/cap/landing-67813c/b.jsonl does not exist"),
    ("vanished_file_job",
     "FileNotFoundException: File file:/tmp/cap/landing-67813c/b.jsonl does not exist"),
    # Python worker: the participants' own errors.
    ("record_too_large",
     "RecordTooLarge: record of 2,097,239 bytes (key and value) for key 'c000003' exceeds the max.message.bytes "
     "1,048,588 of topic t-capture-0242abdf"),
    ("copy_nul",
     "StagingRefused: Postgres refused row 5 of Spark partition 0 while staging into "
     "twophase_staging.stg_74462d7aea761d9e33e13d45 for core_tests.t_capture_1f310475: a text value holds a "
     "NUL character (U+0000)"),
    # Python worker, raw client errors: psycopg2's CONTEXT line is kept; an exception that
    # COPY's read() raised is taken out of psycopg2's "error in .read() call".
    ("copy_nul_raw",
     'CharacterNotInRepertoire: invalid byte sequence for encoding "UTF8": 0x00 CONTEXT: COPY '
     "stg_d3dd838ff297135b6eb764c4, line 5"),
    ("kafka_size_inside_copy",
     'KafkaException: KafkaError{code=MSG_SIZE_TOO_LARGE,val=10,str="Unable to produce message: Broker: '
     'Message size too large"}'),
])
def test_captured_spark_failures(name, expected):
    cause = _captured(name)
    assert cause.startswith(expected), cause
    assert "\n" not in cause and len(cause) <= MAX_LENGTH
    assert "Python worker" not in cause and "collectToPython" not in cause


def test_the_wrappers_alone_say_nothing():
    """What the load's reason said before: the first line of each wrapper."""
    text = (TEXTS / "vanished_file_job.txt").read_text()
    assert "An error occurred while calling o489.collectToPython." in text
    assert "Caused by: java.io.FileNotFoundException" in text


def test_python_cause_chain_follows_raise_from_to_the_innermost():
    try:
        try:
            raise FileNotFoundError("input folder /data/2026-11-20 does not exist")
        except FileNotFoundError as inner:
            raise RuntimeError("the job failed") from inner
    except RuntimeError as exc:
        assert root_cause(exc) == "FileNotFoundError: input folder /data/2026-11-20 does not exist"


def test_implicit_context_is_not_the_cause():
    """An error raised while handling another (no `from`) is the failure itself."""
    try:
        try:
            raise BufferError("queue full")
        except BufferError:
            raise ValueError("record too large")
    except ValueError as exc:
        assert root_cause(exc) == "ValueError: record too large"


def test_worker_traceback_with_chained_causes():
    text = """
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/x/worker.py", line 3, in f
    open(path)
FileNotFoundError: [Errno 2] No such file or directory: '/data/a.jsonl'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/worker.py", line 5, in f
    raise RuntimeError("reading failed") from exc
RuntimeError: reading failed

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/worker.py", line 7, in f
    raise ValueError("cleanup failed")
ValueError: cleanup failed
"""
    # The last exception propagated; it was raised while handling the others, not from them.
    assert root_cause_of_text("PythonException", text) == "ValueError: cleanup failed"
    direct = text.split("\n\nDuring handling")[0]
    assert root_cause_of_text("PythonException", direct) == (
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/a.jsonl'")


def test_long_messages_are_cut_in_the_middle():
    path = "/data/" + "x" * 1000 + "/part-1.jsonl"
    cause = root_cause(FileNotFoundError(f"File file:{path} does not exist"))
    assert len(cause) <= MAX_LENGTH
    assert cause.startswith("FileNotFoundError: File file:/data/xxx") and cause.endswith("part-1.jsonl does not exist")
    assert " … " in cause


def test_a_message_of_several_lines_is_one_line():
    assert root_cause(ValueError("first\n   second\tthird")) == "ValueError: first"
    assert one_line("a\n b\t\tc ") == "a b c"
    assert root_cause(KeyError()) == "KeyError"


def test_kafka_errors_that_mean_no_broker_answered():
    refused = KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"))
    down = kafka_unreachable("127.0.0.1:19092", refused, "Connect to ipv4#127.0.0.1:19092 failed: Connection refused")
    assert isinstance(down, KafkaUnreachable)
    assert str(down).startswith("Kafka at 127.0.0.1:19092 is unreachable: Connect to ipv4#127.0.0.1:19092 failed: "
                                "Connection refused (Failed to get metadata")
    timed_out = kafka_unreachable("h:1", KafkaException(KafkaError(KafkaError._TIMED_OUT, "Local: Timed out")))
    assert str(timed_out).startswith("Kafka at h:1 did not answer in time: Local: Timed out")
    assert kafka_unreachable("h:1", KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))) is None
    assert kafka_unreachable("h:1", ValueError("x")) is None


def test_postgres_errors_that_mean_the_server_is_down_never_show_the_password():
    dsn = "host=127.0.0.1 port=15432 dbname=twophase user=twophase password=s3cret"
    refused = psycopg2.OperationalError('connection to server at "127.0.0.1", port 15432 failed: Connection refused\n'
                                        "\tIs the server running on that host and accepting TCP/IP connections?\n")
    down = postgres_unreachable(dsn, refused)
    assert isinstance(down, PostgresUnreachable)
    assert str(down).startswith('Postgres at 127.0.0.1:15432 is unreachable: connection to server at "127.0.0.1", '
                                "port 15432 failed: Connection refused Is the server running")
    assert "s3cret" not in str(down) and "\n" not in str(down)
    assert postgres_unreachable(dsn, psycopg2.DataError("bad value")) is None


def test_servers_raises_a_down_server_as_one_line_and_lets_other_errors_through():
    with pytest.raises(KafkaUnreachable, match="^Kafka at b:1 is unreachable"):
        with servers(kafka_bootstrap="b:1"):
            raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    with pytest.raises(ZeroDivisionError):
        with servers(pg_dsn="host=h", kafka_bootstrap="b:1"):
            1 / 0
