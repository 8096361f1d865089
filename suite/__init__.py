"""commbench's harness: CLI, topology, backends, timing, metrics, workloads, results."""

__version__ = "0.1.0"
