"""Benchmark harness of issue 5: see bench/README.md and `python -m bench --help`."""
