"""Host cost of one ``fast+sched`` call before any byte moves, per rank: synthesise the
schedule, build this rank's plan, bind it to buffers; and the one-off checks of ``fast``'s
setup (plan check, traffic fingerprint). Single process, no MPI: every rank computes the
same thing, so rank 0's cost is every rank's.

``python -m suite.benchmarks.fast_executor`` (``make bench``) prints one row per cluster
shape, zipf:0.8 traffic of 16 MiB per rank, medians of repeated calls.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

SHAPES = ((2, 4), (4, 8), (8, 8), (16, 8), (40, 8))  # servers x GPUs per server
SIZE = 16 << 20


def _median_us(fn, budget_s: float = 0.3, min_reps: int = 5) -> float:
    samples = []
    t_end = time.perf_counter() + budget_s
    while len(samples) < min_reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples)) * 1e6


def measure(servers: int, g: int) -> dict:
    from kernels.fast import schedule
    from kernels.fast.executor import PlanExecutor, fingerprint, schedule_problem
    from suite.workloads import generate

    p = servers * g
    d = generate("zipf:0.8@1", p, SIZE, unit=2)
    topo = SimpleNamespace(rank=0, size=p, gpus_per_node=g, node=0, local=0)
    transport = SimpleNamespace(topo=topo, empty=lambda n, dt: np.empty(n, dt))
    ex = PlanExecutor(transport)
    send = np.empty(int(d[0].sum()), np.uint8)
    recv = np.empty(int(d[:, 0].sum()), np.uint8)
    sched = schedule(d, g, unit=2)
    plan = sched.plan(0)
    row, col = int(d[0].sum()), int(d[:, 0].sum())

    def per_call() -> None:
        s = schedule(d, g, unit=2)
        ex.bind(s.plan(0), send, recv)

    return {
        "shape": f"{servers}x{g}",
        "stages": sched.nstages,
        "ops": len(plan.ops),
        "schedule_us": _median_us(lambda: schedule(d, g, unit=2)),
        "plan_us": _median_us(lambda: schedule(d, g, unit=2).plan(0)),
        "bind_us": _median_us(lambda: ex.bind(plan, send, recv)),
        "per_call_us": _median_us(per_call),
        "check_us": _median_us(lambda: schedule_problem(sched, d, g, 0, row, col)),
        "fingerprint_us": _median_us(lambda: fingerprint(d, g)),
    }


def main() -> int:
    from kernels.fast import warmup

    warmup()
    cols = ("shape", "stages", "ops", "schedule_us", "plan_us", "bind_us", "per_call_us",
            "check_us", "fingerprint_us")  # fmt: skip
    print("# fast+sched host cost per call on rank 0 (plan_us includes schedule_us;")
    print("# per_call_us = schedule + plan + bind); check/fingerprint run once in setup")
    print(" ".join(f"{c:>14s}" for c in cols))
    for servers, g in SHAPES:
        row = measure(servers, g)
        print(" ".join(f"{row[c]:>14.1f}" if isinstance(row[c], float) else f"{row[c]!s:>14}"
                       for c in cols))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
