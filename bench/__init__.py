"""Benchmark harness for mend: see bench/README.md."""
