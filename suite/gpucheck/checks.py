"""``make gpu-check``: every GPU check of the suite, each in its own process with a timeout.

``python -m commbench.gpucheck OUT_DIR`` runs the checks below and writes, after each one,
``OUT_DIR/summary.json`` and ``OUT_DIR/summary.txt``: every check ``ok``, ``failed`` (with
the error: an exception, a crash, a timeout, or the time budget spent before it could
start) or ``not applicable`` (with the reason, e.g. NVSHMEM on a ROCm GPU). A check that
hangs is killed at its timeout and the next one runs; the whole run stays within
``--budget`` seconds (default 330, under six minutes with start-up). Exit status 1 if any
check failed, 2 for a usage error.

Checks, in order: the environment (CuPy, device, NCCL/RCCL, MPI and whether it takes device
buffers, nvshmem4py); CuPy copies and event timing; the GPU transport on one rank; NVRAR's
LL8 kernels bit for bit with subnormal inputs, and their speed as a fraction of a device
copy; nvshmem4py on one PE; ``NvshmemRail.run`` on one PE looped back to itself (2 and 4
rail nodes), also captured in a CUDA graph; two ranks on the one GPU (NCCL, NVSHMEM, the
rail between two PEs); FAST's executor; then ``commbench run`` for every implementation
registered for the backend, and again with ``-G`` (graph capture) for every capturable one.
The ``commbench run`` checks are correctness checks (``#wrong`` must be 0) and run up to
``--jobs`` at a time: their timings are not measurements.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from commbench.errors import NotApplicable
from commbench.launch import find_mpiexec, local_env

if TYPE_CHECKING:
    from commbench.kernels.fast.plan import RankPlan

OK, FAILED, NOT_APPLICABLE = "ok", "failed", "not applicable"
DEFAULT_BUDGET_S = 330.0
#: A check is not started with less than this left of the budget.
MIN_START_S = 5.0


@dataclass(frozen=True)
class Check:
    """One check: a function (``module:name``, run in a worker process on ``ranks`` ranks)
    or a command (``argv``, passes when it exits 0); ``skip`` makes it not applicable."""

    name: str
    timeout_s: float
    func: str | None = None
    argv: tuple[str, ...] = ()
    ranks: int = 1
    skip: str | None = None
    concurrent: bool = False  # may run next to other concurrent checks


@dataclass
class Result:
    name: str
    status: str
    seconds: float = 0.0
    error: str | None = None
    details: dict = field(default_factory=dict)


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


# ---------------------------------------------------------------- the list


def driver_checks(backend: str, runs_dir: Path) -> list[Check]:
    """``commbench run`` of every registered implementation on ``backend`` (one rank), and
    with ``-G 4`` for every capturable one; the rest listed as not applicable. Each run
    writes its own ``runs_dir/*.jsonl`` (they run at the same time)."""
    from commbench.kernels.registry import GRAPH_BACKENDS, implementations

    checks = []
    for spec in implementations():
        key = f"{spec.collective}/{spec.name}"
        stem = runs_dir / f"{spec.collective}-{spec.name.replace('+', '-')}"
        argv = (sys.executable, "-m", "commbench", "run", spec.collective, "--impl", spec.name,
                "--backend", backend, "--gpus-per-node", "1", "-b", "64K", "-e", "4M",
                "-f", "8", "-n", "8", "-w", "2", "--watchdog", "60")  # fmt: skip
        if spec.collective == "allreduce":
            dtype = "bf16" if spec.gpu_dtypes is None or "bfloat16" in spec.gpu_dtypes else "float"
            argv += ("-d", dtype)
        problem = spec.support_problem(backend)
        run = (*argv, "--out", f"{stem}.jsonl")
        checks.append(Check(f"run {key}", 90, argv=run, skip=problem, concurrent=True))
        graph = problem or spec.support_problem(backend, graph=True)
        if backend not in GRAPH_BACKENDS:
            graph = f"CuPy has no graph capture on {backend}"
        captured = (*argv, "-G", "4", "--out", f"{stem}-graph.jsonl")
        checks.append(Check(f"graph {key}", 90, argv=captured, skip=graph, concurrent=True))
    return checks


def all_checks(backend: str | None, out_dir: Path) -> list[Check]:
    nv = "commbench.gpucheck.nvrar"
    checks = [
        Check("environment", 60, func="commbench.gpucheck.checks:check_environment"),
        Check("cupy copy and events", 60, func="commbench.gpucheck.checks:check_cupy_events"),
        Check("transport on one rank", 60, func="commbench.gpucheck.checks:check_transport"),
        Check("ll8 kernels, subnormals", 90, func=f"{nv}:check_ll8_kernels"),
        Check("ll8 bandwidth vs device copy", 60, func=f"{nv}:check_ll8_bandwidth"),
        Check("nvshmem one PE", 60, func=f"{nv}:check_nvshmem_one_pe"),
        Check("NvshmemRail.run loopback + graph", 90, func=f"{nv}:check_rail_loopback"),
        Check("two ranks on one GPU", 90, func=f"{nv}:check_two_pes_one_gpu", ranks=2),
        Check("fast executor", 90, func="commbench.gpucheck.checks:check_fast_executor"),
    ]
    if backend is None:
        return checks
    return checks + driver_checks(backend, out_dir / "runs")


# ---------------------------------------------------------------- running


def run_worker(func: str, result_path: str, ranks: int = 1) -> int:
    """In the worker process: run ``func`` and write its result (rank 0 of ``ranks``, with
    every rank's outcome)."""
    module, name = func.split(":")
    t0 = time.perf_counter()
    try:
        details = getattr(importlib.import_module(module), name)() or {}
        status, error = OK, None
    except NotApplicable as exc:
        details, status, error = {}, NOT_APPLICABLE, str(exc)
    except BaseException as exc:  # recorded, not raised: the parent reads the file
        details, status, error = {"trace": traceback.format_exc()}, FAILED, repr(exc)
    result = {"status": status, "error": error, "details": details}
    if ranks > 1:
        from mpi4py import MPI

        result = _merge_ranks(MPI.COMM_WORLD.gather(result))
    if result is not None:  # written whole, then renamed: the parent never reads half
        result["seconds"] = time.perf_counter() - t0
        tmp = Path(f"{result_path}.tmp")
        tmp.write_text(json.dumps(result, default=str))
        tmp.replace(result_path)
    return 0


def _merge_ranks(results: list[dict] | None) -> dict | None:
    """Rank 0's view of every rank's result: the worst status wins."""
    if results is None:
        return None
    for status in (FAILED, NOT_APPLICABLE):
        bad = [(r, res) for r, res in enumerate(results) if res["status"] == status]
        if bad:
            rank, res = bad[0]
            return {**res, "error": f"rank {rank}: {res['error']}"}
    return {"status": OK, "error": None, "details": {f"rank {r}": res["details"]
                                                     for r, res in enumerate(results)}}  # fmt: skip


def _run_process(argv: Sequence[str], timeout_s: float) -> tuple[int | None, str, str]:
    """(exit status or None on timeout, stdout, stderr); a timed-out process group is killed."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=local_env(),
                                start_new_session=True)  # fmt: skip
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read()


def run_check(check: Check, timeout_s: float) -> Result:
    """Run one check in its own process(es); never raises, never waits past the timeout."""
    if check.skip:
        return Result(check.name, NOT_APPLICABLE, error=check.skip)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        if check.func:
            argv = [sys.executable, "-m", "commbench.gpucheck", "--worker", check.func,
                    "--result", str(result_file), "--ranks", str(check.ranks)]  # fmt: skip
            if check.ranks > 1:
                launcher = find_mpiexec()
                if launcher is None:
                    return Result(check.name, FAILED, error="no mpiexec: install the MPI wheel "
                                  "(make gpu-wheels) or put one on PATH")  # fmt: skip
                argv = [launcher, "-n", str(check.ranks), *argv]
        else:
            argv = list(check.argv)
        code, stdout, stderr = _run_process(argv, timeout_s)
        seconds = time.perf_counter() - t0
        found = json.loads(result_file.read_text()) if result_file.exists() else None
    if found is not None:  # the worker finished the check (it may still hang or fail at exit)
        res = Result(check.name, found["status"], seconds, found["error"], found["details"])
        if code != 0 and res.status == OK:
            how = f"was killed after {timeout_s:g} s" if code is None else f"exited with {code}"
            res.status, res.error = FAILED, f"the check passed, then the process {how}"
            res.details["stderr"] = stderr[-2000:]
        return res
    if code is None:
        return Result(check.name, FAILED, seconds, f"timed out after {round(timeout_s, 1):g} s (killed)",
                      {"stderr": stderr[-2000:]})  # fmt: skip
    if check.func:
        return Result(check.name, FAILED, seconds, f"exit status {code} with no result "
                      f"(crashed): {_last_line(stderr)}", {"stderr": stderr[-2000:]})  # fmt: skip
    details = {"stdout": stdout.splitlines()[-12:], "stderr": stderr[-2000:]}
    if code != 0:
        return Result(check.name, FAILED, seconds, f"exit status {code}: {_last_line(stderr)}",
                      details)  # fmt: skip
    return Result(check.name, OK, seconds, None, details)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "(no output)"


def write_summary(out_dir: Path, results: Sequence[Result], meta: dict) -> None:
    """``summary.json`` and ``summary.txt`` in ``out_dir``, replaced whole (never torn)."""
    counts = {s: sum(r.status == s for r in results) for s in (OK, FAILED, NOT_APPLICABLE)}
    doc = {**meta, "counts": counts, "checks": [vars(r) for r in results]}
    lines = [f"# commbench gpu-check: {counts[OK]} ok, {counts[FAILED]} failed, "
             f"{counts[NOT_APPLICABLE]} not applicable"]  # fmt: skip
    lines += [f"# {k}: {v}" for k, v in meta.items()]
    for r in results:
        note = f"  {r.error}" if r.error else ""
        lines.append(f"{r.status:15s} {r.seconds:6.1f}s  {r.name}{note}")
    for name, text in (("summary.json", json.dumps(doc, indent=2, default=str)),
                       ("summary.txt", "\n".join(lines) + "\n")):  # fmt: skip
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out_dir / name)


def run_all(
    checks: Sequence[Check],
    out_dir: Path,
    budget_s: float,
    jobs: int = 4,
    meta: dict | None = None,
    echo: Callable[[str], None] = print,
) -> list[Result]:
    """Every check in order (the concurrent ones ``jobs`` at a time, after the others);
    each timeout is cut to what is left of ``budget_s``; the summary is rewritten after
    each check."""
    deadline = time.monotonic() + budget_s
    meta = {"budget_s": budget_s, **(meta or {})}
    results: dict[str, Result] = {}
    lock = threading.Lock()

    def one(check: Check) -> Result:
        left = deadline - time.monotonic()
        if check.skip is None and left < MIN_START_S:
            res = Result(check.name, FAILED, error=f"not run: the time budget ({budget_s:g} s) "
                         "was spent before it could start")  # fmt: skip
        else:
            res = run_check(check, max(1.0, min(check.timeout_s, left)))
        with lock:
            results[check.name] = res
            write_summary(out_dir, [results[c.name] for c in checks if c.name in results], meta)
            echo(f"{res.status:15s} {res.seconds:6.1f}s  {check.name}"
                 + (f"  {res.error}" if res.error else ""))  # fmt: skip
        return res

    for check in checks:
        if not check.concurrent:
            one(check)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, [c for c in checks if c.concurrent]))
    return [results[c.name] for c in checks]
