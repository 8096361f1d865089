"""Multi-rank checks of the all-reduce implementations (started under mpiexec by the
``allreduce_checks`` fixture of tests/conftest.py for tests/test_nvrar_mpi.py and
tests/test_allreduce_algorithms.py). Builds Topology + CpuTransport directly on
sub-communicators (the first ranks of the job), so one launch covers many
(nodes, gpus_per_node) shapes and several checks.

    mpiexec -n 12 python tests/nvrar_mpi_worker.py TASK [-- TASK ...]

Tasks, run in turn; rank 0 prints one ``RESULT {json}`` line for each, in order:
  matrix IMPL[,IMPL...] SHAPES   compare with MPI_Allreduce; SHAPES like 3x2,5x1 (N x G)
  repeat N G CALLS               consecutive nvrar calls without clearing, two sizes
  timeout N ABSENT               rank ABSENT never calls nvrar; the others must time out
Ranks without a part in a task (or a shape) wait for the others without spinning, so
they leave the cores to the ranks that work.
"""

from __future__ import annotations

import json
import sys
import time
import zlib

import numpy as np
from mpi4py import MPI

from commbench.harness.backends.cpu import CpuTransport
from commbench.harness.topology import Topology
from commbench.kernels.cases import AllreduceCase
from commbench.kernels.nvrar.schedule import NvrarTimeout
from commbench.kernels.reduce import BF16
from commbench.kernels.registry import lookup

WORLD = MPI.COMM_WORLD
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16, np.dtype(np.int32)]
COUNTS = [3, 1000, 1001]  # below G, even, odd
EPS = {"float32": 2.0**-22, "float16": 2.0**-9, "bfloat16": 2.0**-6}


def sub_world(nranks: int):
    """The first ``nranks`` ranks (``MPI.COMM_NULL`` on the others); collective over WORLD,
    entered by every rank at once (:func:`quiet_barrier` first)."""
    quiet_barrier()
    if nranks > WORLD.size:
        raise SystemExit(f"needs {nranks} ranks, the job has {WORLD.size}")
    color = 0 if WORLD.rank < nranks else MPI.UNDEFINED
    return WORLD.Split(color, WORLD.rank)


def quiet_barrier() -> None:
    """A barrier over WORLD that sleeps between polls: a rank waiting here for a check it
    has no part in does not spin (12 ranks share 2 cores)."""
    req = WORLD.Ibarrier()
    pause = 1e-4
    while not req.Test():
        time.sleep(pause)
        pause = min(2 * pause, 5e-3)


def impl_factory(spec: str):
    """``name`` or ``name[key=value;...]`` -> (factory, params)."""
    name, _, rest = spec.partition("[")
    params = dict(kv.split("=") for kv in rest.rstrip("]").split(";") if kv)
    return lookup("allreduce", name).factory, params


def inputs(rank: int, count: int, dtype: np.dtype, rep: int) -> np.ndarray:
    rng = np.random.default_rng([rank, count, rep, zlib.crc32(str(dtype).encode())])
    if dtype.kind == "i":
        return rng.integers(-(2**24), 2**24, count).astype(dtype)
    return rng.standard_normal(count).astype(dtype)


def reference(t: CpuTransport, send: np.ndarray, op: str) -> tuple[np.ndarray, np.ndarray]:
    """MPI_Allreduce's answer for ``send`` and the sum of absolute values (the tolerance)."""
    ref = np.empty_like(send)
    t.allreduce(send, ref, op, "world")
    absum = np.empty(len(send), np.float64)
    t.topo.world.Allreduce(np.abs(send.astype(np.float64)), absum, op=MPI.SUM)
    return ref, absum


def check_case(
    t: CpuTransport, spec: str, impl, dtype: np.dtype, count: int, op: str, rep: int,
    refs: dict | None = None,
):  # fmt: skip
    """Problems (strings) of one call of ``impl`` against MPI_Allreduce. ``refs`` keeps
    MPI's answers for the next implementation on the same ranks (the same inputs)."""
    topo = t.topo
    send = inputs(topo.rank, count, dtype, rep)
    if op == "prod" and dtype.kind == "f":
        send = (np.sign(send.astype(np.float32)) + (send == 0)).astype(dtype)
    case = AllreduceCase(send, np.full(count, 7, dtype=dtype), count, dtype, op)
    impl.setup(case)
    impl.run(case)
    refs = {} if refs is None else refs
    key = (str(dtype), count, op, rep)
    if key not in refs:
        refs[key] = reference(t, send, op)
    ref, absum = refs[key]
    got64, ref64 = case.recv.astype(np.float64), ref.astype(np.float64)
    where = f"{spec} N={topo.nodes} G={topo.gpus_per_node} {dtype} n={count} op={op} rep={rep}"
    problems = []
    if dtype.kind == "i" or op in ("max", "min", "prod"):
        bad = np.flatnonzero(got64 != ref64)
    else:
        tol = EPS[str(dtype)] * topo.size * absum + 1e-30
        bad = np.flatnonzero(~(np.abs(got64 - ref64) <= tol))
    if bad.size:
        i = int(bad[0])
        problems.append(f"{where}: {bad.size} wrong, first [{i}] got {got64[i]} want {ref64[i]}")
    digests = topo.world.allgather(zlib.crc32(case.recv.tobytes()))
    if len(set(digests)) != 1:
        problems.append(f"{where}: ranks disagree bitwise")
    return problems


def matrix(impl_specs: list[str], shapes: list[tuple[int, int]]) -> dict:
    problems: list[str] = []
    cases = 0
    for nodes, g in shapes:
        comm = sub_world(nodes * g)
        if comm == MPI.COMM_NULL:
            continue
        topo = Topology.create(comm, gpus_per_node=g)
        t = CpuTransport(topo)
        refs: dict = {}  # MPI's answers, computed for the first implementation only
        for spec in impl_specs:
            factory, params = impl_factory(spec)
            impl = factory(t, params)
            for dtype in DTYPES:
                ops = ["sum", "max"] if dtype.kind == "i" else ["sum"]
                for count in COUNTS:
                    for op in ops:
                        for rep in range(2):  # new data, same buffers: no stale answers
                            problems += check_case(t, spec, impl, dtype, count, op, rep, refs)
                            cases += 1
            if hasattr(impl, "close"):
                impl.close()
        topo.free()
        comm.Free()
    allp = WORLD.gather(problems)
    return {"cases": cases, "problems": sorted({p for ps in allp or [] for p in ps})}


def repeat(nodes: int, g: int, calls: int) -> dict:
    comm = sub_world(nodes * g)
    if comm == MPI.COMM_NULL:
        return {}
    topo = Topology.create(comm, gpus_per_node=g)
    t = CpuTransport(topo)
    impl = lookup("allreduce", "nvrar").factory(t, {"timeout_s": 30})
    p, r = topo.size, topo.rank
    cases = {}
    for count in (5, 9):  # two sizes, two windows, back and forth
        send = np.zeros(count, np.int32)
        cases[count] = AllreduceCase(send, np.zeros(count, np.int32), count, np.dtype(np.int32))
    i = np.arange(1, 10, dtype=np.int64)
    wrong = 0
    t.barrier()
    t0 = time.perf_counter()
    for call in range(calls):
        case = cases[(5, 9)[call // 1000 % 2]]  # switch size every 1000 calls
        case.send[:] = (r + 1) * i[: case.count] + call
        impl.setup(case)
        impl.run(case)
        want = i[: case.count] * (p * (p + 1) // 2) + p * call
        wrong += int(np.count_nonzero(case.recv != want))
    elapsed = time.perf_counter() - t0
    seqs = sorted(w.seq for w in impl.rail._windows.values()) if impl.rail else []
    out = comm.gather({"wrong": wrong, "seqs": seqs, "s": elapsed})
    impl.close()
    topo.free()
    comm.Free()
    if WORLD.rank:
        return {}
    return {
        "wrong": sum(o["wrong"] for o in out),
        "seqs": sorted({tuple(o["seqs"]) for o in out}),
        "seconds": max(o["s"] for o in out),
    }


def timeout(nodes: int, absent: int) -> dict:
    comm = sub_world(nodes)
    if comm == MPI.COMM_NULL:
        return {}
    topo = Topology.create(comm, gpus_per_node=1)
    t = CpuTransport(topo)
    impl = lookup("allreduce", "nvrar").factory(t, {"timeout_s": 1.0})
    count = 64
    case = AllreduceCase(np.ones(count, np.float32), np.zeros(count, np.float32), count,
                         np.dtype(np.float32))  # fmt: skip
    impl.setup(case)
    impl.run(case)  # one good call first: the failure is in a later call, with old data around
    result = {"rank": topo.rank}
    if topo.rank == absent:
        result["absent"] = True
    else:
        t0 = time.perf_counter()
        try:
            impl.run(case)
            result["error"] = None
        except NvrarTimeout as exc:
            result["error"] = str(exc)
        result["seconds"] = time.perf_counter() - t0
    out = comm.gather(result)
    comm.Barrier()
    if WORLD.rank == 0:
        return {"ranks": out}
    return {}


def task(argv: list[str]) -> dict:
    mode = argv[0]
    if mode == "matrix":
        shapes = [tuple(int(x) for x in s.split("x")) for s in argv[2].split(",")]
        return matrix(argv[1].split(","), shapes)
    if mode == "repeat":
        return repeat(int(argv[1]), int(argv[2]), int(argv[3]))
    if mode == "timeout":
        return timeout(int(argv[1]), int(argv[2]))
    raise SystemExit(f"unknown mode {mode!r}")


def main(argv: list[str]) -> None:
    tasks: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--":
            tasks.append([])
        else:
            tasks[-1].append(arg)
    for args in tasks:
        t0 = time.perf_counter()
        res = task(args)
        quiet_barrier()
        if WORLD.rank == 0:
            res["task_seconds"] = round(time.perf_counter() - t0, 2)
            print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
