"""The source contract suite's feeds: one per kind of source, each a source under test and
the means to grow it, change it and read a range of it as its job would (record ids)."""

from __future__ import annotations

import os
from pathlib import Path

from support import wait_settled
from twophase.sources import Range
from twophase.sources.files import FilesSource
from twophase.sources.memory import MemoryFeed, MemorySource

FEEDS = ("memory", "files", "kafka")
SERVERLESS = ("memory", "files")


class MemorySourceFeed:
    """Records are ints 0, 1, 2...; a record id is the record."""

    def __init__(self, name: str, cap: int = 0):
        self.feed, self.name = MemoryFeed(), name
        self.source = MemorySource(name, cap)
        self.reader = self.source.open(feed=self.feed)
        self.unit = "record"

    def add(self, n: int) -> None:
        start = self.feed.bounds(self.name)[1]
        self.feed.append(self.name, *range(start, start + n))

    def read(self, fixed: Range) -> list:
        return self.reader.read(fixed)

    def change(self, fixed: Range) -> None:
        """Make the range no longer read as fixed (a retention deleted its first record)."""
        self.feed.trim(self.name, fixed.position["start"] + 1)


class FilesSourceFeed:
    """Each file is a record; its id is its name. A hidden file and a subfolder's file are
    there from the start: never read, always reported."""

    def __init__(self, folder: Path, cap: int = 0):
        self.folder, self.count = folder, 0
        folder.mkdir(parents=True)
        (folder / "_SUCCESS").write_text("")
        (folder / "late").mkdir()
        (folder / "late" / "x.json").write_text("{}\n")
        self.source = FilesSource(folder.as_uri(), "new", cap)
        self.reader = self.source.open()
        self.unit = "file"

    def add(self, n: int) -> None:
        for _ in range(n):
            path = self.folder / f"part-{self.count:05d}.json"
            path.write_text(f'{{"n": {self.count}}}\n')
            os.utime(path, ns=(10**18 + self.count, 10**18 + self.count))  # listed in the order they landed
            self.count += 1

    def read(self, fixed: Range) -> list:
        return [Path(uri.removeprefix("file://")).name for uri, _, _ in fixed.position["files"]]

    def change(self, fixed: Range) -> None:
        """Make the range no longer read as fixed (its first file grew)."""
        first = Path(fixed.position["files"][0][0].removeprefix("file://"))
        with first.open("a") as f:
            f.write('{"n": -1}\n')


class KafkaSourceFeed:
    """A fresh topic of three partitions; records are "0", "1"... (no key: spread over the
    partitions), each sent in a transaction of its own, so the topic's offsets hold
    transaction markers between them, as a transactional producer's do."""

    PARTITIONS = 3

    def __init__(self, bootstrap: str, topic: str, cap: int = 0):
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        from twophase.connections import Connections
        from twophase.sources.kafka import KafkaSource

        self.bootstrap, self.topic, self.count = bootstrap, topic, 0
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, self.PARTITIONS, 1)])[topic].result()
        self.admin = admin
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"feed-{topic}"})
        self.producer.init_transactions(30)
        self.source = KafkaSource(topic, group=f"feed-{topic}", cap=cap)
        self.reader = self.source.open(Connections("", kafka_bootstrap=bootstrap))
        self.unit = "record"

    def add(self, n: int) -> None:
        for _ in range(n):
            self.producer.begin_transaction()
            self.producer.produce(self.topic, str(self.count).encode())
            self.producer.commit_transaction(30)
            self.count += 1
        wait_settled(self.bootstrap, self.topic)

    def read(self, fixed: Range) -> list:
        from confluent_kafka import Consumer, TopicPartition

        spans = {int(p): span for p, span in fixed.position["partitions"].items() if span[0] < span[1]}
        if not spans:
            return []
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"read-{self.topic}",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(self.topic, p, a) for p, (a, _) in spans.items()])
            seen, idle = [], 0
            while idle < 3:
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    # A range may end on a transaction marker, which is never delivered: done
                    # when every partition's position reached its end, or nothing came for 1.5 s.
                    positions = consumer.position([TopicPartition(self.topic, p) for p in spans])
                    if all(tp.offset >= spans[tp.partition][1] for tp in positions):
                        break
                    idle += 1
                    continue
                idle = 0
                if msg.offset() < spans[msg.partition()][1]:
                    seen.append(msg.value().decode())
            return seen
        finally:
            consumer.close()

    def change(self, fixed: Range) -> None:
        """Make the range no longer read as fixed: retention deletes the first record of
        its first partition with records."""
        from confluent_kafka import TopicPartition

        p, (start, _) = next((int(p), span) for p, span in sorted(fixed.position["partitions"].items())
                             if span[0] < span[1])
        self.admin.delete_records([TopicPartition(self.topic, p, start + 1)])[TopicPartition(
            self.topic, p, start + 1)].result()

    def close(self) -> None:
        self.admin.delete_topics([self.topic])


def feed_for(kind: str, tmp_path: Path, cap: int = 0, request=None):
    if kind == "memory":
        return MemorySourceFeed(tmp_path.name, cap)
    if kind == "files":
        return FilesSourceFeed(tmp_path / "landing", cap)
    if kind == "kafka":
        return KafkaSourceFeed(request.getfixturevalue("kafka_bootstrap"),
                               request.getfixturevalue("unique_name").replace("_", "-"), cap)
    raise ValueError(f"no feed of kind {kind!r}")
