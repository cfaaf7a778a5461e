"""twophase: atomic batch loads into any number of Postgres tables, Kafka topics and
Iceberg tables, as a two-phase commit.

The core is plain Python (no Airflow import): the transaction log (log/), the participants
(participants/), the Spark staging glue, the coordinator steps with the lease of phase 2,
the audit (audit/), recovery, verify and the CLI (`python -m twophase`).
See docs/protocol.md for the protocol and its failure cases.
"""
