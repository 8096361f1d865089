"""Test-only: every CPU all-gather, reduce-scatter and broadcast against the MPI library's
own (``MPI_Allgather``, ``MPI_Reduce_scatter_block``, ``MPI_Bcast``), byte for byte, on
the first 2, 3, ... 8 ranks of the job. Hypothesis draws the cases (a byte size split as
the harness splits it, so most do not divide evenly; dtype, reduction, root, in place,
data seed) with a fixed seed: every rank draws the same ones, and a wrong answer is
collected, never raised, so the ranks never part ways.

    mpiexec -n 8 python tests/scripts/blocks_mpi_check.py [EXAMPLES]

Run in the shared 8-rank job of tests/scripts/driver_runs.py (``--script``); rank 0
prints one ``RESULT {json}`` line: the cases compared and the problems found.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from commbench.harness.backends.cpu import CpuTransport  # noqa: E402
from commbench.harness.backends.dtypes import parse_dtype  # noqa: E402
from commbench.harness.topology import Topology  # noqa: E402
from commbench.kernels.cases import BlockCase  # noqa: E402
from commbench.kernels.mpitypes import mpi_type_and_op  # noqa: E402
from commbench.kernels.registry import implementations  # noqa: E402
from tests.nvrar_mpi_worker import WORLD, sub_world  # noqa: E402

COLLECTIVES = ("allgather", "reducescatter", "broadcast")
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")


def impls(collective: str, nranks: int) -> list[str]:
    return [s.name for s in implementations(collective)
            if "cpu" in s.backends and s.ranks_problem(nranks) is None]  # fmt: skip


def inputs(collective: str, rank: int, n: int, dtype: np.dtype, op: str, seed: int):
    """Random bytes to move (all-gather, broadcast); small integers to reduce, exact in
    every dtype whatever the order (reduce-scatter)."""
    rng = np.random.default_rng([seed, rank])
    if collective != "reducescatter":
        return np.frombuffer(rng.bytes(n * dtype.itemsize), dtype=dtype).copy()
    lo = 0 if dtype.kind == "u" else -8
    values = rng.integers(lo, 9, n)
    if op == "prod":
        values = np.where(values >= 0, 1, -1) if lo else np.minimum(values, 1)
    return values.astype(dtype)


def reference(t: CpuTransport, collective, data, count, dtype, op, root) -> np.ndarray:
    """The MPI library's answer for this rank's ``data``."""
    comm, p = t.topo.world, t.topo.size
    if collective == "allgather":
        out = np.empty(count * p, dtype)
        comm.Allgather([data.view(np.uint8), MPI.BYTE], [out.view(np.uint8), MPI.BYTE])
    elif collective == "broadcast":
        out = data.copy()
        comm.Bcast([out.view(np.uint8), MPI.BYTE], root=root)
    else:
        out = np.empty(count, dtype)
        datatype, mpi_op = mpi_type_and_op(dtype, op)
        comm.Reduce_scatter_block([data, datatype], [out, datatype], op=mpi_op)
    return out


def case_for(t, collective, data, count, dtype, op, root, inplace) -> BlockCase:
    r, p = t.topo.rank, t.topo.size
    poison = np.frombuffer(b"\xa5" * (count * p * dtype.itemsize), dtype=dtype)
    if collective == "allgather":
        recv = poison[: count * p].copy()
        send = recv[r * count : (r + 1) * count] if inplace else np.empty(count, dtype)
        send[...] = data
    elif collective == "reducescatter":
        send = data.copy()
        recv = send[r * count : (r + 1) * count] if inplace else poison[:count].copy()
    else:
        recv = poison[:count].copy()
        send = recv if inplace else data.copy()
        if inplace and r == root:
            send[...] = data
    return BlockCase(collective, send, recv, count, dtype, r, p, op, root, inplace)


def check_shape(p: int, examples: int) -> tuple[int, list[str]]:
    comm = sub_world(p)
    if comm == MPI.COMM_NULL:
        return 0, []
    topo = Topology.create(comm, gpus_per_node=1)
    t = CpuTransport(topo)
    algos = {(c, name): None for c in COLLECTIVES for name in impls(c, p)}
    for c, name in algos:
        algos[c, name] = next(s for s in implementations(c) if s.name == name).factory(t, {})
    problems: list[str] = []
    cases = 0

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(
        size=st.integers(0, 3000),
        dtype=st.sampled_from(DTYPES),
        op=st.sampled_from(("sum", "prod", "max", "min")),
        root=st.integers(0, p - 1),
        inplace=st.booleans(),
        seed=st.integers(0, 2**20),
    )
    def example(size, dtype, op, root, inplace, seed):
        nonlocal cases
        dt = parse_dtype(dtype)
        for collective in COLLECTIVES:  # counts as the harness makes them from a size
            count = size // dt.itemsize if collective == "broadcast" else size // (p * dt.itemsize)
            n = count * p if collective == "reducescatter" else count
            data = inputs(collective, topo.rank, n, dt, op, seed)
            want = reference(t, collective, data, count, dt, op, root)
            for (c, name), algo in algos.items():
                if c != collective:
                    continue
                case = case_for(t, collective, data, count, dt, op, root, inplace)
                algo.setup(case)
                algo.run(case)
                cases += 1
                if case.recv.tobytes() != want.tobytes():
                    problems.append(
                        f"{collective} {name} P={p} rank {topo.rank} size={size} {dtype} op={op} "
                        f"root={root} inplace={inplace} seed={seed}: not MPI's bytes"
                    )

    example()
    topo.free()
    comm.Free()
    return cases, problems


def main(argv: list[str]) -> int:
    examples = int(argv[0]) if argv else 10
    cases, problems = 0, []
    for p in range(2, WORLD.size + 1):
        n, found = check_shape(p, examples)
        cases += n if WORLD.rank == 0 else 0
        problems += found
    gathered = WORLD.gather(problems)
    if WORLD.rank == 0:
        found = sorted({x for part in gathered for x in part})
        print("RESULT " + json.dumps({"cases": cases, "problems": found}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
