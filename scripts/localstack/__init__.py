"""The local stack: PostgreSQL, Kafka and Airflow on loopback, no Docker (see scripts/stack)."""
