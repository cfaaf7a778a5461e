"""The Kafka participant: stage to a staging topic, commit by one transactional copy.

- begin (driver): create the staging and target topics when missing, with explicit settings.
- stage (executors, KafkaWriter): an idempotent producer (acks=all) writes the
  partition's records to the staging topic, each with headers `load_id`,
  `twophase.part` (Spark partition) and `twophase.attempt` (a token per task attempt).
  The target topic is not touched, so its read_committed consumers never stall.
- pre-commit (driver): keep only the attempts Spark reported as successful; the vote
  records per staging partition the offset range [first, last] and count, and a checksum.
- commit: copy exactly those records (this load, winning attempts, inside the ranges) to
  the target topic in ONE transaction that also commits the copy's consumer offsets, so
  readers see the whole load at once and a crashed copy restarts exactly once: after a
  crash, init_transactions() fences and aborts the old attempt, and committed offsets
  tell a retry that the copy already happened.
- abort: never touches the target topic; fences any copy still open for the load.

Files:
- target.py: KafkaTarget, what a load says about a topic (plain data, no client), and
  the checks of topic names.
- client.py: the Kafka client plumbing every other file uses: configuration, connection
  logs, KafkaUnreachable, retries of passing errors, topic creation.
- writer.py: KafkaWriter, the executor side (produce one Spark partition to staging), and
  the record format (headers, checksum).
- copy.py: the commit copy: staged records to the target topics in one transaction, and
  the copy group's offsets that tell a retry (or an abort) what already happened.
- jvm_copy.py, jvm/StagedCopy.java: the same copy in a JVM, for large loads (the Java
  client copies a record in a fraction of one Python call's time); Python drives it.
- reader.py: reading a topic as consumers do (verify, tests).
- participant.py: KafkaParticipant, the driver side (stage, prepare, commit, abort).

The names below are imported from their modules on first use, so that importing the
target (twophase.spec does) loads no Kafka client.
"""

from __future__ import annotations

from ...lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "target": ("KafkaTarget", "STAGING_SUFFIX", "TOPIC_MAX_LENGTH", "check_topic"),
    "client": ("ConnectionLog", "DEFAULT_MAX_MESSAGE_BYTES", "ensure_topics", "kafka_client", "kafka_config"),
    "writer": ("H_ATTEMPT", "H_LOAD", "H_PART", "KafkaWriter", "RecordTooLarge", "public_headers",
               "record_checksum"),
    "reader": ("count_topic_by_load", "iter_topic"),
    "participant": ("NAME", "KafkaParticipant"),
})
