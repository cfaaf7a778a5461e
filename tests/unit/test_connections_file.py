"""The connections file the prepare operator hands its Spark job, and the executors' check's
verdict, without any server."""

from __future__ import annotations

import json
import os
import stat

import pytest

from twophase.connections import Connections
from twophase.participants.iceberg import IcebergParticipant
from twophase.participants.kafka import KafkaParticipant
from twophase.participants.postgres import PostgresParticipant
from twophase.spark.executors import FIX, problem, required
from twophase.spec import SpecError


def _conns() -> Connections:
    return Connections("host=db password=s3cret dbname=pipeline", "broker:9092",
                       {"reporting": ("postgres", "host=db2 password=other dbname=rep")},
                       iceberg_catalog=json.dumps({"type": "sql", "uri": "postgresql://u:pw@h/cat"}))


def test_the_file_round_trips_and_only_its_owner_can_read_it(tmp_path):
    path = tmp_path / "twophase-connections.json"
    _conns().to_file(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert Connections.from_file(path) == _conns()
    with pytest.raises(FileExistsError):  # never written over (nor through a planted link)
        _conns().to_file(path)


@pytest.mark.parametrize("content, message", [
    (None, "cannot read the connections file {path}: No such file or directory"),
    ("not json", "the connections file {path} is not JSON"),
    ('["TWOPHASE_PG_DSN"]', "the connections file {path} must be a JSON object of strings"),
    ('{"TWOPHASE_KAFKA_BOOTSTRAP": "b:1"}', "TWOPHASE_PG_DSN not set in the connections file {path}"),
    ('{"TWOPHASE_PG_DSN": "host=x", "TWOPHASE_CONNECTIONS": "[1]"}',
     "TWOPHASE_CONNECTIONS in the connections file {path} must be a JSON object"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "c.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SpecError) as caught:
        Connections.from_file(path)
    assert str(caught.value).startswith(message.format(path=path))
    assert "\n" not in str(caught.value)


def _participants():
    return [PostgresParticipant, KafkaParticipant]  # what required() reads is on the classes


def test_each_kind_declares_what_its_writers_import():
    assert PostgresParticipant.executor_packages == ("psycopg2", "pyarrow")
    assert KafkaParticipant.executor_packages == ("confluent_kafka", "pyarrow")
    assert "pyarrow.parquet" in IcebergParticipant.executor_packages
    assert required(_participants()) == {
        "pyarrow": ["the staging", "the postgres participant", "the kafka participant"],
        "psycopg2": ["the postgres participant"], "confluent_kafka": ["the kafka participant"]}


def test_the_verdict_names_the_package_the_host_the_python_and_the_fix():
    needs = required(_participants())
    ok = ("worker-1", "/usr/bin/python3.11 3.11.2", {})
    assert problem(needs, [ok, ok]) is None
    lacking = ("worker-2", "/usr/bin/python3.11 3.11.2", {"confluent_kafka": ""})
    assert problem(needs, [ok, lacking, lacking]) == (
        "executors on host worker-2 (python /usr/bin/python3.11 3.11.2) lack confluent_kafka, needed by the kafka "
        f"participant: {FIX}")
    broken = ("worker-3", "/opt/py 3.11.9", {"psycopg2": "ImportError: libpq.so.5: cannot open", "pyarrow": ""})
    assert problem(needs, [lacking, broken]) == (
        "executors on host worker-2 (and 1 other host) (python /usr/bin/python3.11 3.11.2) lack confluent_kafka, "
        f"needed by the kafka participant: {FIX}")
    assert problem(needs, [broken]) == (
        "executors on host worker-3 (python /opt/py 3.11.9) lack pyarrow and cannot import psycopg2 (ImportError: "
        "libpq.so.5: cannot open), needed by the postgres participant, the staging and the kafka participant: "
        f"{FIX}")
