"""Sample data of the example pipeline: daily order events as JSON lines."""
