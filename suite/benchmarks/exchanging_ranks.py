"""What one message between nodes costs by how many ranks exchange at once.

On ranks that share cores (the emulated cluster: 8 ranks on 2) a message's latency is
mostly the hosts' work on it, shared by the ranks that move messages: the cost model's
``Fabric.nic_us_among`` charges ``active`` of ``ranks`` exchanging ranks that share of the
every-rank latency, never less than one pair's (calibrate's ``pingpong-all`` and quiet
``pingpong``). HAN's inter-node reduce and broadcast are the case: the node leaders
exchange, the other ranks wait. Here, after a barrier, the ranks of a set exchange 8 B
with a partner on another node, ``--steps`` times (recursive doubling over the nodes,
same local rank), while the others wait in the next barrier; per set, the median step:

- ``all``: every rank;
- ``leaders``: local rank 0 of each node;
- ``pair``: ranks 0 and the first of node 1;

then the law's leaders (``max(pair, all x leaders / ranks)``) over the measured ones.

    python -m commbench.benchmarks.exchanging_ranks [--nodes 4] [--ranks-per-node 2] [--rounds 3]

(root) brings up its own emulated cluster (prefix ``cbx``, the ``target-deep`` queue,
``--nic`` 100mbit), runs and takes it down; ``mpiexec -n P python -m
commbench.benchmarks.exchanging_ranks --worker --ranks-per-node G`` runs under a launcher
already (blocks of G consecutive ranks are the nodes).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError

PREFIX = "cbx"
SETS = ("all", "leaders", "pair")


def partner(which: str, rank: int, step: int, nodes: int, g: int) -> int:
    """Rank ``rank``'s partner in set ``which`` at ``step``: the pair's other rank, else
    the same local rank on the node that differs from its own in bit ``step %
    log2(nodes)``."""
    if which == "pair":
        return g if rank == 0 else 0
    node, local = divmod(rank, g)
    bits = (nodes - 1).bit_length()
    return (node ^ (1 << (step % bits))) * g + local


def members(which: str, nodes: int, g: int) -> list[int]:
    """The ranks of set ``which`` (:data:`SETS`)."""
    if which == "all":
        return list(range(nodes * g))
    if which == "leaders":
        return [node * g for node in range(nodes)]
    return [0, g]


def law_us(all_us: float, pair_us: float, active: int, ranks: int) -> float:
    """The cost model's latency of ``active`` of ``ranks`` ranks exchanging
    (:meth:`commbench.kernels.model.fabric.Fabric.nic_us_among`) from the every-rank and
    the one-pair latencies."""
    from commbench.kernels.model.fabric import Fabric

    fabric = Fabric(gpus_per_node=1, nic_GBps=1.0, nic_us=all_us, scaleup_GBps=1.0,
                    scaleup_us=0.0, nic_quiet_us=pair_us)  # fmt: skip
    return fabric.nic_us_among(active, ranks)


def step_us(comm, which: str, nodes: int, g: int, steps: int, reps: int) -> float:
    """The median over ``reps`` of this set's steps (us; NaN on a rank outside it)."""
    mine = comm.rank in members(which, nodes, g)
    send, recv = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    out = []
    for rep in range(reps + 2):
        comm.Barrier()
        start = time.perf_counter()
        if mine:
            for k in range(steps):
                q = partner(which, comm.rank, k, nodes, g)
                comm.Sendrecv(send, dest=q, sendtag=7, recvbuf=recv, source=q, recvtag=7)
        if rep >= 2:  # two warm-ups
            out.append((time.perf_counter() - start) * 1e6 / steps)
    return float(np.median(out)) if mine else float("nan")


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    g = args.ranks_per_node
    nodes = comm.size // g
    if comm.size % g or nodes < 2 or nodes & (nodes - 1):
        problem = (f"{comm.size} ranks, --ranks-per-node {g}: run it on 2, 4, 8 ... nodes "
                   "of that many ranks each")  # fmt: skip
        return owncluster.refuse(comm, "exchanging_ranks", problem)
    if comm.rank == 0:
        print(f"# {nodes} nodes x {g} ranks, 8 B each way, {args.steps} steps x "
              f"{args.reps} reps a set; us a step (median over ranks of each rank's median)",
              flush=True)  # fmt: skip
    for _round in range(args.rounds):
        got = {w: comm.gather(step_us(comm, w, nodes, g, args.steps, args.reps), root=0)
               for w in SETS}  # fmt: skip
        if comm.rank == 0:
            med = {w: float(np.nanmedian(got[w])) for w in SETS}
            law = law_us(med["all"], med["pair"], nodes, comm.size)
            print(" ".join(f"{w} {med[w]:.1f}" for w in SETS)
                  + f" | law's leaders {law:.1f} ({law / med['leaders']:.2f})", flush=True)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("exchanging_ranks", __doc__)
    parser.add_argument("--nodes", type=int, default=4, help="emulated nodes (4)")
    parser.add_argument("--ranks-per-node", type=int, default=2, help="ranks per node (2)")
    parser.add_argument("--steps", type=int, default=20, help="exchanges per rep (20)")
    parser.add_argument("--reps", type=int, default=30, help="reps per set and round (30)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    args = parser.parse_args(argv)
    if min(args.steps, args.reps, args.rounds, args.ranks_per_node) < 1:
        parser.error("--ranks-per-node, --steps, --reps and --rounds must be at least 1")

    def spec():
        if args.nodes < 2 or args.nodes & (args.nodes - 1):
            raise UsageError(f"--nodes {args.nodes}: give a power of two (2, 4, 8 ...)")
        return owncluster.cluster_spec(PREFIX, args.nodes, args.ranks_per_node, args.nic)

    return owncluster.start(parser, args, worker, spec,
                            ("ranks_per_node", "steps", "reps", "rounds"))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
