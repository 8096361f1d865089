"""The token-bucket probe: its report, its refusals, a 4-rank run."""

from __future__ import annotations

import numpy as np
import pytest

from commbench.benchmarks import bucket_state
from tests.mpirun import run_mpi
from tests.probes import refusal


def test_the_report_gives_each_mode_and_their_ratio() -> None:
    rested, steady = np.array([500.0, 560.0, 600.0]), np.array([900.0, 980.0, 1000.0])
    lines = bucket_state.report(4096, 64, 10, rested, steady).splitlines()
    assert lines[0] == "4K after 10 calls of 64: 560 us (530-580)"
    assert lines[1] == "4K after 10 calls of 4K: 980 us (940-990)"
    assert lines[2] == "ratio (median) 1.75"


@pytest.mark.parametrize("argv, says", [
    (["--before", "0"], "must be at least 1"),
    (["--size", "4K", "--rest-size", "8K"], "--rest-size 8192 must be below --size 4096"),
    (["--size", "4095"], "multiples of 4 bytes"),
    (["--nodes", "1"], "--nodes 1: give 2 or more"),
    (["--ranks-per-node", "0"], "--ranks-per-node 0: give 1 or more"),
])  # fmt: skip
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    assert says in refusal(bucket_state.main, argv, capsys)


def test_worker_on_four_ranks_of_one_host() -> None:
    argv = ["-m", "commbench.benchmarks.bucket_state", "--worker", "--calls", "3",
            "--before", "2", "--size", "1K"]  # fmt: skip
    proc = run_mpi(4, argv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "# 4 ranks, 3 timed calls per mode"
    assert lines[1].startswith("1K after 2 calls of 64: ") and lines[1].endswith(")")
    assert lines[2].startswith("1K after 2 calls of 1K: ")
    assert lines[3].startswith("ratio (median) ")
    assert lines[4].startswith("a rank's end of a call to its next start (the barrier between): ")
    proc = run_mpi(1, argv, timeout=120)
    assert proc.returncode == 2 and "run it on 2 or more" in proc.stderr
