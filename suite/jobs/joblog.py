"""Where a failed job step failed: the node (and rank) named by its log.

A batch script calls ``python -m commbench.jobs.joblog LOG TASKS_PER_NODE`` after a step fails
and puts what it prints into the ``error`` sentinel. The log names the place in one of
four ways, tried in order: commbench's own error line (``commbench run: rank R on
HOST: ...``), the rank wrapper's (``commbench rank R on HOST: exit status S``,
jobs/rank-status.sh), srun's (``srun: error: HOST: task R: Exited ...``), or Open MPI's
(``Process name: [prterun-...@1,R]``: rank R only; the node then comes from the job's
node list, ``scontrol show hostnames``, filled ``TASKS_PER_NODE`` ranks per node).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence

_COMMBENCH = re.compile(r"commbench (?:run: )?rank (\d+) on (\S+?):")
_SRUN = re.compile(r"srun: error: (\S+?): tasks? (\d+)")
_PRTE = re.compile(r"Process name: \[[^\]]*,(\d+)\]")


def failed_where(log: str, nodes: Sequence[str] = (), tasks_per_node: int = 0) -> str:
    """``"node HOST (rank R)"``, ``"rank R"`` or ``""`` (the log names no place)."""
    m = _COMMBENCH.search(log)
    if m:
        return f"node {m.group(2)} (rank {m.group(1)})"
    m = _SRUN.search(log)
    if m:
        return f"node {m.group(1)} (rank {m.group(2)})"
    m = _PRTE.search(log)
    if m:
        rank = int(m.group(1))
        index = rank // tasks_per_node if tasks_per_node > 0 else len(nodes)
        if index < len(nodes):
            return f"node {nodes[index]} (rank {rank})"
        return f"rank {rank}"
    return ""


def job_nodes() -> list[str]:
    """This Slurm job's hostnames, in rank order; empty outside a job."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        return []
    done = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30
    )
    return done.stdout.split() if done.returncode == 0 else []


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m commbench.jobs.joblog LOG TASKS_PER_NODE", file=sys.stderr)
        return 2
    with open(argv[0], errors="replace") as f:
        log = f.read()
    where = failed_where(log, job_nodes(), int(argv[1]))
    if where:
        print(where)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
