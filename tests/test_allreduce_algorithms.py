"""The textbook all-reduce baselines (ring, recursive doubling, Rabenseifner) on the cpu
backend: equal to MPI_Allreduce for 1..8 ranks, odd and even counts, every dtype."""

from __future__ import annotations

import numpy as np

from commbench.kernels.baselines._allreduce import block_bounds

#: Run by tests/nvrar_mpi_worker.py in the job the ``allreduce_checks`` fixture starts.
ALLREDUCE_CHECKS = {
    "baselines": (8, ["matrix", "ring,recursive-doubling,rabenseifner",
                      ",".join(f"{p}x1" for p in range(1, 9))]),
}  # fmt: skip


def test_baselines_equal_mpi_allreduce_for_1_to_8_ranks(allreduce_checks):
    res = allreduce_checks["baselines"]
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
