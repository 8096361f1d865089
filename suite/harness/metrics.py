"""nccl-tests' metric definitions (GB = 1e9 bytes) and the cross-rank time reductions."""

from __future__ import annotations

import numpy as np

#: ``-a`` values, as nccl-tests numbers them.
TIME_REDUCTIONS = {0: "rank0", 1: "avg", 2: "min", 3: "max"}


def busbw_factor(collective: str, nranks: int) -> float:
    """Bus-bandwidth factor (nccl-tests' doc/PERFORMANCE.md): 2(n-1)/n for all-reduce,
    (n-1)/n for all-gather, reduce-scatter and all-to-all(v), 1 for broadcast."""
    n = nranks
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("reducescatter", "reduce_scatter", "allgather", "alltoall", "alltoallv"):
        return (n - 1) / n
    if collective == "broadcast":
        return 1.0
    raise ValueError(f"no bus-bandwidth factor for {collective!r}")


def algbw_GBps(metric_bytes: int, time_us: float) -> float:
    """Algorithm bandwidth: S / t in GB/s (0 when t is 0)."""
    return metric_bytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0


def alltoallv_metric_bytes(traffic: np.ndarray) -> int:
    """S for all-to-allv: the busiest rank's max(send, recv) bytes."""
    return int(max(traffic.sum(axis=1).max(), traffic.sum(axis=0).max()))


def reduce_times(rank_times_us: np.ndarray, how: str) -> float:
    """One time from the per-rank times: ``rank0``, ``avg``, ``min`` or ``max``."""
    t = np.asarray(rank_times_us, dtype=float)
    return float({"rank0": t[0], "avg": t.mean(), "min": t.min(), "max": t.max()}[how])


def summarise(rank_times_us: np.ndarray, samples_us: np.ndarray | None = None) -> dict:
    """min/avg/max over ranks; p50/p99 over per-call samples when kept, else over ranks."""
    t = np.asarray(rank_times_us, dtype=float)
    pool = np.asarray(samples_us, dtype=float).ravel() if samples_us is not None else t
    return {
        "time_us_min": float(t.min()),
        "time_us_avg": float(t.mean()),
        "time_us_max": float(t.max()),
        "time_us_p50": float(np.percentile(pool, 50)),
        "time_us_p99": float(np.percentile(pool, 99)),
    }


#: A GPU point is host-bound when issuing a call took at least this share of its time:
#: the device then waited for Python, and the time measures the host, not the fabric.
HOST_BOUND_SHARE = 0.95


def host_bound(backend: str, host_us: np.ndarray, time_us: np.ndarray) -> bool | None:
    """Whether any rank's issuing kept up with its device no better than the transfer
    itself (GPU backends); None on the cpu backend, where issuing is the call."""
    if backend == "cpu":
        return None
    return bool(np.any(np.asarray(host_us) >= HOST_BOUND_SHARE * np.asarray(time_us)))
