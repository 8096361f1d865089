"""Test-only: every cpu implementation against MPI's own collective, byte for byte, on
the topology MPI reports (real hostnames: the emulated cluster's nodes), in one launch.

    mpirun ... python tests/scripts/cluster_parity.py OUT.json [IMPL ...]

Rank 0 writes ``{"topology": ..., "alltoallv": {impl: wrong}, "allreduce": {...}, ...}``:
``wrong`` counts bytes differing from the result of ``MPI_Alltoallv``, ``MPI_Allreduce``,
``MPI_Allgather``, ``MPI_Reduce_scatter_block`` or ``MPI_Bcast`` (summed over ranks, over
two workloads / sizes and two calls each; all-gather and reduce-scatter sizes that do not
split evenly into rank blocks, broadcast from rank 1, in and out of place).
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from commbench.harness import collectives
from commbench.harness.backends import create_transport
from commbench.harness.backends.dtypes import parse_dtype
from commbench.harness.topology import Topology
from commbench.harness.workloads import generate
from commbench.kernels.registry import implementations, lookup

ALLTOALLV = (("uniform", 96 << 10), ("zipf:0.8", 256 << 10))
ALLREDUCE = (64 << 10, 1 << 20)  # bf16 bytes
#: (collective, size, dtype, in place): sizes floored to rank blocks as the harness does
BLOCKS = (
    ("allgather", 100_003, "float32", False), ("allgather", 1 << 20, "bf16", True),
    ("reducescatter", (64 << 10) + 6, "bf16", False), ("reducescatter", 1 << 20, "float32", True),
    ("broadcast", (96 << 10) + 4, "float32", False), ("broadcast", 1 << 20, "bf16", True),
)  # fmt: skip


def run_twice(transport, impl, point, rep: int) -> np.ndarray:
    case = point.case
    impl.setup(case)
    out = []
    for call in range(2):
        collectives.fill(transport, point, rep=rep + call)
        transport.barrier()
        impl.run(case)
        transport.synchronize()
        out.append(transport.to_host(case.recv).view(np.uint8).copy())
    return np.concatenate(out)


def points(transport, topo):
    for workload, size in ALLTOALLV:
        traffic = generate(workload, topo.size, size, seed=3, unit=1)
        yield "alltoallv", collectives.alltoallv_point(transport, traffic, size, 1, workload)
    for size in ALLREDUCE:
        yield "allreduce", collectives.allreduce_point(transport, size, parse_dtype("bf16"), "sum")
    for coll, size, dtype, inplace in BLOCKS:
        yield (
            coll,
            collectives.block_point(
                transport, coll, size, parse_dtype(dtype), "sum", root=1, inplace=inplace
            ),
        )


def main() -> int:
    out_path, wanted = sys.argv[1], set(sys.argv[2:])
    topo = Topology.create()
    t = create_transport("cpu", topo)
    wrong: dict[str, dict[str, int]] = {
        c: {} for c in ("alltoallv", "allreduce", *collectives.BLOCK_COLLECTIVES)
    }
    for rep, (coll, point) in enumerate(points(t, topo)):
        ref = run_twice(t, lookup(coll, "mpi").factory(t, {}), point, rep)
        for spec in implementations(coll):
            if "cpu" not in spec.backends or (wanted and spec.name not in wanted):
                continue
            if spec.ranks_problem(topo.size):  # recursive doubling/halving on 2^k ranks only
                continue
            impl = spec.factory(t, {})
            got = run_twice(t, impl, point, rep)
            n = int(np.count_nonzero(got != ref)) if got.size == ref.size else got.size + 1
            total = topo.world.allreduce(n)
            wrong[coll][spec.name] = wrong[coll].get(spec.name, 0) + total
            if hasattr(impl, "close"):
                impl.close()
    hosts = topo.world.gather(MPI.Get_processor_name())
    if topo.rank == 0:
        result = {
            "topology": {"nodes": topo.nodes, "gpus_per_node": topo.gpus_per_node,
                         "hosts": hosts},
            **wrong,
        }  # fmt: skip
        with open(out_path, "w") as fh:
            json.dump(result, fh)
    t.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
