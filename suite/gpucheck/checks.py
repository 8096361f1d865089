"""``make gpu-check``: every GPU check of the suite, each in its own process with a timeout
(:mod:`commbench.gpucheck.runner` runs them and writes the summary).

Checks, cheap and likely to pass first, those likeliest to hang last: the environment (CuPy,
device, NCCL/RCCL, MPI and whether it takes device buffers, nvshmem4py); FAST's numba core
(compiled once here, loaded from the cache by every later process); CuPy copies and event
timing; the GPU transport on one rank; FAST's executor; NVRAR's LL8 kernels bit for bit
with subnormal inputs, and their speed as a fraction of a device copy; then ``commbench
run`` for every implementation registered for the backend (one rank: ``#wrong`` must be
0), and every capturable one captured in a CUDA graph whose replays' output is checked
(up to ``--jobs`` at a time: their timings are not measurements); nvshmem4py on one PE;
``NvshmemRail.run`` on one PE looped back to itself (2 and 4 rail nodes), also captured in
a CUDA graph; last, two ranks on the one GPU (NCCL, NVSHMEM, the rail between two PEs).
One-rank ``nvrar`` runs never reach NVSHMEM (no second node): the NVSHMEM checks are the
ones that show the rail works.

``COMMBENCH_GPUCHECK_REHEARSAL=1`` (the rehearsal's alone, ``tests/test_gpu_rehearsal.py``;
never set it on a GPU machine) adds two checks that hang and crash on purpose and runs the
``commbench run`` checks on the CPU backend.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from commbench.gpucheck.runner import Check
from commbench.launch import find_mpiexec

if TYPE_CHECKING:
    from commbench.kernels.fast.plan import RankPlan

DEFAULT_BUDGET_S = 330.0
REHEARSAL_ENV = "COMMBENCH_GPUCHECK_REHEARSAL"


# ---------------------------------------------------------------- the checks (in a worker)


def gpu_backend() -> tuple[str | None, str]:
    """('cuda' | 'rocm' | None, why not) from the installed CuPy, without opening a device."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CuPy that cannot load its CUDA libraries
        return None, f"CuPy cannot be imported: {exc!r}"
    return ("rocm" if getattr(cupy.cuda.runtime, "is_hip", False) else "cuda"), ""


def check_environment() -> dict:
    """What this machine offers: CuPy and the device, NCCL/RCCL, MPI and whether it takes
    device buffers, nvshmem4py, mpiexec."""
    import cupy
    from mpi4py import MPI

    from commbench.harness.backends.gpu import gpu_unavailable_reason
    from commbench.kernels.baselines.mpi import mpi_gpu_support

    backend, why = gpu_backend()
    reason = why or gpu_unavailable_reason(backend)
    if reason:
        raise RuntimeError(f"no usable GPU backend: {reason}")
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    from cupy.cuda import nccl

    out = {
        "backend": backend,
        "device": name,
        "devices": cupy.cuda.runtime.getDeviceCount(),
        "cupy": cupy.__version__,
        "runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "driver": cupy.cuda.runtime.driverGetVersion(),
        "nccl": nccl.get_version(),
        "mpi": MPI.Get_library_version().splitlines()[0],
        "mpi_takes_device_buffers": list(mpi_gpu_support(backend)),
        "mpiexec": find_mpiexec(),
        "python": sys.version.split()[0],
    }
    out["nvshmem4py"] = _installed("nvshmem4py-cu13", "nvshmem4py-cu12")
    return out


def _installed(*dists: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in dists:
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            pass
    return "not installed"


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

    from commbench.harness.backends import create_transport
    from commbench.harness.topology import Topology

    topo = Topology.create(gpus_per_node=1)
    t = create_transport(gpu_backend()[0], topo)
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
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(t.stream)
    for _ in range(reps):
        t.allreduce(x, y)
    stop.record(t.stream)
    stop.synchronize()
    out["allreduce_4MiB_us"] = cupy.cuda.get_elapsed_time(start, stop) / reps * 1e3
    start.record(t.stream)
    for _ in range(reps):
        t.exchange([(0, sendbuf)], [(0, recvbuf)])
    stop.record(t.stream)
    stop.synchronize()
    out["sendrecv_self_1MiB_us"] = cupy.cuda.get_elapsed_time(start, stop) / reps * 1e3
    t.close()
    return out


def check_fast_executor() -> dict:
    """FAST's executor on one GPU: a plan's NCCL/RCCL send/recv groups and device copies;
    fast, fast+sched, balance-only and spreadout through the GPU transport, byte-exact."""
    return check_executor_on_one_gpu(gpu_backend()[0])


FAST_IMPLS = ("fast", "fast+sched", "balance-only", "spreadout")


def self_plan(nbytes: int, hop: int) -> RankPlan:
    """A two-step plan a single rank can run: the first ``hop`` bytes go to itself over
    the rail group into a staging buffer (step 0, with a device copy of the rest into the
    receive buffer), then from the staging buffer over the node group into place."""
    from commbench.kernels.fast import plan as P

    rows = [
        (0, P.SEND, P.RAIL, 0, P.SEND_BUF, 0, -1, 0, hop),
        (0, P.RECV, P.RAIL, 0, -1, 0, P.STAGE0, 0, hop),
        (0, P.COPY, P.LOCAL, -1, P.SEND_BUF, hop, P.RECV_BUF, hop, nbytes - hop),
        (1, P.SEND, P.NODE, 0, P.STAGE0, 0, -1, 0, hop),
        (1, P.RECV, P.NODE, 0, -1, 0, P.RECV_BUF, 0, hop),
    ]
    ops = np.array(rows, dtype=P.OP_DTYPE)
    sizes = {P.BALANCE: 0, P.STAGE0: hop, P.STAGE1: 0, P.TAIL: 0}
    return P.RankPlan(0, ops, 2, sizes)


def check_executor_on_one_gpu(backend: str, nbytes: int = 24 << 20, reps: int = 20) -> dict:
    """Byte-exact results and event-timed microseconds per call; AssertionError on a
    wrong byte."""
    import cupy

    from commbench.harness.backends import create_transport
    from commbench.harness.topology import Topology
    from commbench.kernels.cases import AlltoallvCase
    from commbench.kernels.fast.executor import PlanExecutor, plan_problem
    from commbench.kernels.registry import lookup

    topo = Topology.create(gpus_per_node=1)
    t = create_transport(backend, topo)
    host = (np.arange(nbytes, dtype=np.int64) * 7 % 251).astype(np.uint8)
    send = t.from_host(host)
    out: dict = {"nbytes": nbytes}

    def timed(fn) -> float:
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(t.stream)
        for _ in range(reps):
            fn()
        stop.record(t.stream)
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / reps * 1e3

    plan = self_plan(nbytes, nbytes // 3)
    assert plan_problem(plan, 1, 1, nbytes, nbytes) is None
    for groups in ("world", "split"):
        recv = t.zeros(nbytes, np.uint8)
        ex = PlanExecutor(t, groups)
        ex.bind(plan, send, recv)
        ex.run()
        got = t.to_host(recv)
        assert np.array_equal(got, host), f"executor ({groups} groups) moved wrong bytes"
        out[f"plan_{groups}_us"] = timed(ex.run)
    traffic = np.array([[nbytes]], dtype=np.int64)
    for name in FAST_IMPLS:
        case = AlltoallvCase(traffic, send, t.zeros(nbytes, np.uint8), 0, 1)
        impl = lookup("alltoallv", name).factory(t, {})
        impl.setup(case)
        impl.run(case)
        assert np.array_equal(t.to_host(case.recv), host), f"{name} moved wrong bytes"
        out[f"{name}_us"] = timed(lambda impl=impl, case=case: impl.run(case))
    t.close()
    topo.free()
    return out


def check_numba_core() -> dict:
    """FAST's numba core, compiled (first time here) or loaded from numba's cache: later
    processes (the executor check, every FAST ``commbench run``) then load it."""
    from commbench.kernels.fast import warmup

    return {"seconds": warmup(), "numba_disable_jit": os.environ.get("NUMBA_DISABLE_JIT", "0")}


#: The sizes of the graph-replay check (bytes), as the ``commbench run`` checks' ends.
GRAPH_SIZES = (64 << 10, 4 << 20)


def check_graph_replay(collective: str, impl: str, backend: str, dtype: str | None,
                       calls: int = 4) -> dict:  # fmt: skip
    """``calls`` calls of ``impl`` captured in one CUDA/HIP graph, as ``commbench run -G``
    captures them; the graph replayed on fresh inputs and each replay's output checked like
    the driver's checked call: a graph that replays stale or wrong data fails, not only one
    whose capture raises."""
    import cupy

    from commbench.harness.backends import create_transport
    from commbench.harness.topology import Topology
    from commbench.kernels.registry import lookup

    topo = Topology.create(gpus_per_node=1)
    t = create_transport(backend, topo)
    obj = lookup(collective, impl).factory(t, {})
    out: dict = {"calls_per_graph": calls}
    for size in GRAPH_SIZES:
        point = graph_point(t, collective, size, dtype)
        wrong, launch = graph_replay_wrong(t, obj, point, stream_capture(t.stream), calls)
        assert not any(wrong), f"size {size}: wrong elements after each replay: {wrong}"
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(t.stream)
        for _ in range(5):
            launch()
        stop.record(t.stream)
        stop.synchronize()
        out[f"{size}B_us_per_call"] = cupy.cuda.get_elapsed_time(start, stop) * 1e3 / (5 * calls)
        # NCCL 2.28.9's comm.destroy() waited for a live graph that had captured its
        # point-to-point calls (the first GPU run's fan-out hang): drop the graph first
        del launch
    out["checked"] = "each replay's output, on 2 repetitions' inputs per size"
    if hasattr(obj, "close"):
        obj.close()
    t.close()
    return out


def graph_point(t: Any, collective: str, size: int, dtype: str | None) -> Any:
    """The point the graph check replays: what ``commbench run COLLECTIVE`` measures at
    ``size`` (all-to-allv on uniform traffic; ``dtype`` None: float32)."""
    from commbench.harness import collectives
    from commbench.harness.backends.dtypes import parse_dtype

    workload = "uniform" if collective == "alltoallv" else None
    return collectives.build_point(t, collective, size, parse_dtype(dtype or "float"),
                                   workload=workload)  # fmt: skip


def stream_capture(stream: Any) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """``capture(fn)``: ``fn``'s work on ``stream`` captured in a graph (CuPy's
    ``begin_capture``/``end_capture``, as the driver's ``-G``); returns its launcher."""

    def capture(fn: Callable[[], None]) -> Callable[[], None]:
        stream.begin_capture()
        try:
            fn()
        finally:
            graph = stream.end_capture()
        return lambda: graph.launch(stream)

    return capture


def graph_replay_wrong(t: Any, impl: Any, point: Any, capture: Callable, calls: int
                       ) -> tuple[list[int], Callable[[], None]]:  # fmt: skip
    """Wrong elements after each of two replays of ``calls`` captured calls, each on fresh
    seeded inputs (repetitions 1 and 2; the capture saw repetition 0's), and the launcher."""
    from commbench.harness import collectives

    case = point.case
    collectives.fill(t, point, rep=0)
    impl.setup(case)
    impl.run(case)  # warm, outside the capture (first-call set-up)
    t.synchronize()
    launch = capture(lambda: [impl.run(case) for _ in range(calls)])
    wrong = []
    for rep in (1, 2):
        collectives.fill(t, point, rep=rep)
        launch()
        wrong.append(collectives.count_wrong(t, point, rep=rep))
    return wrong, launch


# ---------------------------------------------------------------- the list

#: What a one-rank NVRAR run leaves out.
NVRAR_ONE_RANK = ("one rank, one node: NVRAR's NVSHMEM rail is never reached; the 'nvshmem one "
                  "PE', 'NvshmemRail.run loopback' and 'two ranks' checks are the ones that count")  # fmt: skip


def rehearsal() -> bool:
    """The rehearsal's environment (``tests/test_gpu_rehearsal.py``), never a GPU machine's."""
    return bool(os.environ.get(REHEARSAL_ENV))


#: The check that compiles FAST's numba core into numba's cache for the processes after it.
NUMBA_CORE = "FAST's numba core"


def driver_checks(backend: str, runs_dir: Path) -> list[Check]:
    """``commbench run`` of every registered implementation on ``backend`` (one rank), and
    the graph replay of every capturable one; the rest listed as not applicable. Each run
    writes its own ``runs_dir/*.jsonl`` (they run at the same time)."""
    from commbench.kernels.registry import GRAPH_BACKENDS, implementations

    checks = []
    for spec in implementations():
        key = f"{spec.collective}/{spec.name}"
        stem = runs_dir / f"{spec.collective}-{spec.name.replace('+', '-')}"
        argv = (sys.executable, "-m", "commbench", "run", spec.collective, "--impl", spec.name,
                "--backend", backend, "--gpus-per-node", "1", "-b", "64K", "-e", "4M",
                "-f", "8", "-n", "8", "-w", "2", "--watchdog", "60")  # fmt: skip
        dtype = None
        if spec.collective == "allreduce":
            dtype = "bf16" if spec.gpu_dtypes is None or "bfloat16" in spec.gpu_dtypes else "float"
            argv += ("-d", dtype)
        problem = spec.support_problem(backend)
        note = NVRAR_ONE_RANK if spec.name == "nvrar" else None
        needs = NUMBA_CORE if spec.factory.__module__.startswith("commbench.kernels.fast") else None
        run = (*argv, "--out", f"{stem}.jsonl")
        checks.append(Check(f"run {key}", 60, argv=run, skip=problem, concurrent=True, note=note,
                            needs=needs))  # fmt: skip
        graph = problem or spec.support_problem(backend, graph=True)
        if backend not in GRAPH_BACKENDS:
            graph = f"CuPy has no graph capture on {backend}"
        replay = "commbench.gpucheck.checks:check_graph_replay"
        checks.append(Check(f"graph {key}", 60, func=replay, concurrent=True, note=note,
                            args=(spec.collective, spec.name, backend, dtype), skip=graph,
                            needs=needs))  # fmt: skip
    return checks


def all_checks(backend: str | None, runs_dir: Path) -> list[Check]:
    """The checks in the order they run (see the module's docstring)."""
    me, nv = "commbench.gpucheck.checks", "commbench.gpucheck.nvrar"
    first = [
        Check("environment", 30, func=f"{me}:check_environment"),
        # compiling it cold took 78 s and then over 90 s on the H200 machine (2026-12-04)
        Check(NUMBA_CORE, 180, func=f"{me}:check_numba_core"),
        Check("cupy copy and events", 30, func=f"{me}:check_cupy_events"),
        Check("transport on one rank", 30, func=f"{me}:check_transport"),
        Check("fast executor", 45, func=f"{me}:check_fast_executor", needs=NUMBA_CORE),
        Check("ll8 kernels, subnormals", 60, func=f"{nv}:check_ll8_kernels"),
        Check("ll8 bandwidth vs device copy", 30, func=f"{nv}:check_ll8_bandwidth"),
    ]
    last = [
        Check("nvshmem one PE", 45, func=f"{nv}:check_nvshmem_one_pe"),
        Check("NvshmemRail.run loopback + graph", 60, func=f"{nv}:check_rail_loopback"),
        Check("two ranks on one GPU", 45, func=f"{nv}:check_two_pes_one_gpu", ranks=2),
    ]
    runs = []
    if rehearsal():  # the CPU backend stands in for the GPU where a check has one
        runs = driver_checks("cpu", runs_dir)
    elif backend is not None:
        runs = driver_checks(backend, runs_dir)
    extra = []
    if rehearsal():  # the ways a check ends that a GPU machine should never show
        fakes = "tests.scripts.gpucheck_fakes"
        extra = [Check("rehearsal: hangs", 5, func=f"{fakes}:hangs"),
                 Check("rehearsal: crashes", 30, func=f"{fakes}:crashes")]  # fmt: skip
    return first + runs + last + extra
