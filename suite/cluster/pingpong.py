"""Point-to-point rate between rank 0 and rank PEER: ``mpiexec -n 2 python -m
commbench.cluster.pingpong [BYTES] [ITERS] [PEER]`` prints one JSON line (GB/s one way).

``cluster up --profile`` runs it on shared memory to scale the NICs from it; on the
cluster it measures either tier (ranks on one node or on two).
"""

from __future__ import annotations

import json
import sys

import numpy as np


def pingpong(comm, nbytes: int, iters: int, peer: int = 1, warmup: int = 3) -> float:
    """Seconds per one-way message of ``nbytes`` between ranks 0 and ``peer`` (others idle)."""
    buf = np.ones(nbytes, dtype=np.uint8)
    rank = comm.rank
    t0 = 0.0
    for i in range(warmup + iters):
        if i == warmup:
            comm.Barrier()
            t0 = _now()
        if rank == 0:
            comm.Send(buf, dest=peer)
            comm.Recv(buf, source=peer)
        elif rank == peer:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)
    return (_now() - t0) / (2 * iters)


def _now() -> float:
    from mpi4py import MPI

    return MPI.Wtime()


def main(argv: list[str] | None = None) -> int:
    from mpi4py import MPI

    args = sys.argv[1:] if argv is None else argv
    nbytes = int(args[0]) if args else 4 << 20
    iters = int(args[1]) if len(args) > 1 else 20
    peer = int(args[2]) if len(args) > 2 else 1
    comm = MPI.COMM_WORLD
    if not 0 < peer < comm.size:
        print(f"pingpong: peer {peer} must be a rank from 1 to {comm.size - 1}", file=sys.stderr)
        return 2
    seconds = pingpong(comm, nbytes, iters, peer)
    if comm.rank == 0:
        hosts = comm.gather(MPI.Get_processor_name())
        print(json.dumps({"bytes": nbytes, "us": seconds * 1e6,
                          "GBps": nbytes / seconds / 1e9, "hosts": [hosts[0], hosts[peer]]}))  # fmt: skip
    else:
        comm.gather(MPI.Get_processor_name())
    return 0


if __name__ == "__main__":
    sys.exit(main())
