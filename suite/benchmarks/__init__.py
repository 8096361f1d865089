"""Benchmarks that `make bench` runs; each prints figures a reader can rerun."""
