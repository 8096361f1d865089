"""``make gpu-check``: one prepared script for a machine with one or more NVIDIA/AMD GPUs.

Each check is a function returning a dict of numbers; a failing check is recorded with its
error and the script goes on. The log and ``gpucheck.json`` go under ``$OUT`` when it is
set (else ``results/gpucheck``). Exit status 1 if any check failed.

Checks: CuPy buffers and event timing; the ``cuda``/``rocm`` transport on one rank (NCCL
communicators, all-reduce, reduce-scatter, all-gather, grouped send/recv to self); NVRAR's
LL8 cell kernels against the CPU code and nvshmem4py on one PE; the FAST executor's device
copies and send/recv groups; and the ``commbench run`` driver end to end on the GPU
backend for every implementation registered for it (one rank, ``nwrong`` must be 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np


def _backend() -> str:
    import cupy

    return "rocm" if getattr(cupy.cuda.runtime, "is_hip", False) else "cuda"


def check_cupy_events() -> dict:
    """Device copy bandwidth of a 256 MiB buffer, timed with events."""
    import cupy

    n = 256 << 20
    a = cupy.ones(n, dtype=cupy.uint8)
    b = cupy.empty_like(a)
    b[...] = a
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    reps = 20
    start.record()
    for _ in range(reps):
        b[...] = a
    stop.record()
    stop.synchronize()
    ms = cupy.cuda.get_elapsed_time(start, stop) / reps
    assert bool((b == 1).all()), "device copy produced wrong bytes"
    return {"bytes": n, "copy_ms": ms, "copy_GBps": 2 * n / (ms * 1e-3) / 1e9}


def check_transport() -> dict:
    """The GPU transport on one rank: NCCL/RCCL collectives and send/recv to self."""
    import cupy

    from suite.backends import create_transport
    from suite.topology import Topology

    topo = Topology.create(gpus_per_node=1)
    t = create_transport(_backend(), topo)
    out = {"describe": t.describe()}
    n = 1 << 20
    x = t.from_host(np.arange(n, dtype=np.float32))
    y = t.zeros(n, np.float32)
    t.allreduce(x, y)
    t.synchronize()
    assert bool((y == x).all()), "allreduce on one rank must copy"
    t.reduce_scatter(x, y, group="node")
    t.allgather(x, y, group="node")
    t.synchronize()
    assert bool((y == x).all()), "allgather on one rank must copy"
    sendbuf = t.from_host(np.arange(n, dtype=np.uint8))
    recvbuf = t.zeros(n, np.uint8)
    t.exchange([(0, sendbuf)], [(0, recvbuf)])
    t.synchronize()
    assert bool((recvbuf == sendbuf).all()), "send/recv to self lost bytes"
    reps = 50
    t0 = time.perf_counter()
    for _ in range(reps):
        t.allreduce(x, y)
    t.synchronize()
    out["allreduce_4MiB_us"] = (time.perf_counter() - t0) / reps * 1e6
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(t.stream)
    for _ in range(reps):
        t.exchange([(0, sendbuf)], [(0, recvbuf)])
    stop.record(t.stream)
    stop.synchronize()
    out["sendrecv_self_1MiB_us"] = cupy.cuda.get_elapsed_time(start, stop) / reps * 1e3
    t.close()
    return out


def check_driver() -> dict:
    """``commbench run`` on the GPU backend, every registered implementation, one rank."""
    from kernels.registry import implementations

    backend = _backend()
    out_file = Path(os.environ.get("OUT") or "results/gpucheck") / "gpucheck-runs.jsonl"
    summary = {}
    for spec in implementations():
        if backend not in spec.backends:
            continue
        args = [sys.executable, "-m", "suite", "run", spec.collective, "--impl", spec.name,
                "--backend", backend, "--gpus-per-node", "1", "-b", "8K", "-e", "8M", "-f", "4",
                "-n", "20", "-w", "5", "--out", str(out_file)]  # fmt: skip
        if spec.collective == "allreduce":
            args += ["-d", "bf16" if spec.name != "mpi" else "float"]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
        summary[f"{spec.collective}/{spec.name}"] = {
            "exit": proc.returncode,
            "table": proc.stdout.splitlines()[-12:],
            "stderr": proc.stderr[-2000:],
        }
    bad = [k for k, v in summary.items() if v["exit"] != 0]
    assert not bad, f"driver failed for {bad}"
    return summary


def check_nvrar_kernels() -> dict:
    """NVRAR's LL8 cell kernels bit for bit against the CPU code, and their bandwidth."""
    from suite.benchmarks.nvrar import check_ll8_kernels

    return check_ll8_kernels()


def check_nvshmem() -> dict:
    """nvshmem4py initialised on one PE (from mpi4py), a symmetric buffer, a put to self."""
    from suite.benchmarks.nvrar import check_nvshmem_one_pe

    return check_nvshmem_one_pe()


def check_fast_executor() -> dict:
    """FAST's executor on one GPU: a plan's NCCL/RCCL send/recv groups (world, node and
    rail communicators, to self) and device copies; fast, fast+sched, balance-only and
    spreadout through the GPU transport, byte-exact, with event-timed calls."""
    from kernels.fast.device_check import check_executor_on_one_gpu

    return check_executor_on_one_gpu(_backend())


CHECKS = [check_cupy_events, check_transport, check_nvrar_kernels, check_nvshmem,
          check_fast_executor, check_driver]  # fmt: skip


def main() -> int:
    folder = Path(os.environ.get("OUT") or "results/gpucheck")
    folder.mkdir(parents=True, exist_ok=True)
    report, failed = {}, []
    for check in CHECKS:
        name = check.__name__
        t0 = time.perf_counter()
        try:
            report[name] = {"ok": True, **check()}
        except Exception as exc:  # recorded, and the next check still runs
            report[name] = {"ok": False, "error": repr(exc), "trace": traceback.format_exc()}
            failed.append(name)
        report[name]["seconds"] = time.perf_counter() - t0
        print(f"{name}: {'ok' if report[name]['ok'] else 'FAILED'} "
              f"({report[name]['seconds']:.1f} s)", flush=True)  # fmt: skip
    (folder / "gpucheck.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"gpu-check: {len(CHECKS) - len(failed)} passed, {len(failed)} failed; "
          f"details in {folder / 'gpucheck.json'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
