"""twophase: atomic batch loads into any number of Postgres tables, Kafka topics and
Iceberg tables, as a two-phase commit. The core is plain Python (no Airflow import).

    protocol/      the two-phase commit: the coordinator's steps, the one driver of phase 2
                   (lease), states, votes and the checks of every claim
    log/           the transaction log: one contract, its Postgres and in-memory forms
    participants/  the kinds of target, one folder each, their contract and their registry
    sources/       what a load reads, fixed at begin and continued exactly by the next load
                   (a folder of files, an in-memory list), their contract and registry
    spark/         the prepare job's frame, the staging pass on the executors, storage URIs,
                   readers of CSV and JSON lines with a schema
    audit/         the rules a pipeline measures on staged data
    gates/         a person's approval and the audit's quarantine, beside the protocol
    ops/           recovery, verify, the status report and the CLI (`python -m twophase`)

Beside them: what a load is (spec), one schema for a frame's targets (schema), the job's
metrics contract (metrics), where the servers are (connections), load ids (ids),
errors a person can read (errors, server_errors, privileges) and the failpoints of the
crash tests. See docs/protocol.md for the protocol and its failure cases.
"""
