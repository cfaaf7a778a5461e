"""The participants of a load: Postgres and Kafka."""
