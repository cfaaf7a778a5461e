"""twophase: atomic batch loads into Postgres and Kafka, as a two-phase commit.

The core is plain Python (no Airflow import): the transaction log, the participants, the
Spark staging glue, the coordinator steps, recovery and the CLI (`python -m twophase`).
See docs/protocol.md for the protocol and its failure cases.
"""
