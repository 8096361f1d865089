"""Stand-in checks for tests/test_gpucheck.py: each behaves like one way a GPU check can
end (pass, not applicable, raise, hang, crash, fail on one rank of two)."""

import os
import signal
import time

from commbench.errors import NotApplicable


def passes() -> dict:
    return {"GBps": 1.5}


def not_here() -> dict:
    raise NotApplicable("NVSHMEM is NVIDIA-only (ROCm GPU)")


def raises() -> dict:
    raise AssertionError("reduce float32 sum: 3 of 100 differ")


def hangs() -> dict:
    time.sleep(600)
    return {}


def crashes() -> dict:
    os.kill(os.getpid(), signal.SIGSEGV)
    return {}


def fails_on_rank_one() -> dict:
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 1:
        raise RuntimeError("rank one's failure")
    return {"rank": MPI.COMM_WORLD.rank}


def hangs_at_exit() -> dict:
    import atexit

    atexit.register(time.sleep, 600)
    return {"checked": True}
