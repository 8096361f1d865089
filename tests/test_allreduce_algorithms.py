"""The textbook all-reduce baselines (ring, recursive doubling, Rabenseifner) on the cpu
backend: equal to MPI_Allreduce for 1..8 ranks, odd and even counts, every dtype."""

from __future__ import annotations

import json

import numpy as np

from commbench.kernels.baselines._allreduce import block_bounds
from tests.mpirun import run_mpi


def test_baselines_equal_mpi_allreduce_for_1_to_8_ranks():
    shapes = ",".join(f"{p}x1" for p in range(1, 9))
    proc = run_mpi(
        8,
        ["tests/nvrar_mpi_worker.py", "matrix", "ring,recursive-doubling,rabenseifner", shapes],
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    res = json.loads(line[len("RESULT ") :])
    assert res["problems"] == []
    assert res["cases"] == 8 * 3 * (3 * 3 * 2 + 3 * 2 * 2)  # shapes x impls x dtype/count/op/rep


def test_block_bounds_match_numpy_array_split():
    for count in (0, 1, 5, 17, 1000):
        for parts in (1, 3, 8):
            want = [
                (int(a[0]) if a.size else None) for a in np.array_split(np.arange(count), parts)
            ]
            got = [s if e > s else None for s, e in block_bounds(count, parts)]
            assert got == want
