"""Why the cpu transport posts sends before receives: a chain of exchanges, both orders.

Recursive doubling's pattern with nothing to reduce: at step k rank r exchanges N bytes
with r XOR 2^k, each step's two posts bound once as persistent requests, the receive first
or the send first, every call after a barrier. Open MPI's ob1 over TCP answers a
rendezvous request with an ACK on the connection that carries its own data. Ranks reach a
step apart (they leave the previous one at different times); the rank that is late was
still inside MPI, so its partner's request is already in, and if it then posts its receive
first, the partner starts streaming before this rank's own request arrives: the ACK for it
waits behind the partner's data, and the exchange's two directions run one after the
other. Posted sends first, the request goes out ahead of the ACK. Open MPI's own
recursive doubling and Rabenseifner post receives first (``ompi_coll_base_sendrecv``).

For each order: the call time (slowest rank, median over calls), each step's wait (post to
``Waitall`` return; median and slowest over ranks and calls) and, over the pairs whose two
posts were ``--gap`` ms or more apart, how long after the later post each partner was
done (median): receives first, the early poster about two one-way transfers, the late one
about one.

    python -m commbench.benchmarks.exchange_order [--nodes 8] [--size 1M] [--calls 5] [--rounds 2]

(root) brings up its own emulated cluster (prefix ``cbx``, one rank per node, the
``target-deep`` queue, ``--nic`` 100mbit), runs the orders alternately in one launch and
takes the cluster down. On an allocation of its own: ``mpiexec -n P python -m
commbench.benchmarks.exchange_order --worker --size 1M`` (P a power of two, the ranks on
different nodes).
"""

from __future__ import annotations

import sys

import numpy as np

from commbench.benchmarks import owncluster
from commbench.cluster.plan import ClusterSpec
from commbench.errors import UsageError
from commbench.units import format_size, parse_size

PREFIX = "cbx"
ORDERS = ("receives-first", "sends-first")


def pair_finishes(posts: np.ndarray, dones: np.ndarray, distance: int, gap_ms: float) -> np.ndarray:
    """For one step's pairs (r, r XOR ``distance``), over calls, those whose posts were at
    least ``gap_ms`` apart: rows of (gap, early poster done after the later post, late
    poster done after it), ms. ``posts`` and ``dones`` are [rank, call] ms from the
    call's start."""
    rows = []
    for a in range(posts.shape[0]):
        b = a ^ distance
        if b < a or b >= posts.shape[0]:
            continue
        for c in range(posts.shape[1]):
            pa, pb = posts[a, c], posts[b, c]
            if abs(pa - pb) < gap_ms:
                continue
            early, late = (a, b) if pa < pb else (b, a)
            later = max(pa, pb)
            rows.append((abs(pa - pb), dones[early, c] - later, dones[late, c] - later))
    return np.array(rows, dtype=float).reshape(-1, 3)


def summary(order: str, posts: np.ndarray, dones: np.ndarray, gap_ms: float) -> str:
    """The lines printed for one order: ``posts``/``dones`` are [rank, call, step] ms."""
    call = dones[:, :, -1].max(axis=0)
    waits = dones - posts
    lines = [f"{order}: call {np.median(call):.1f} ms (median of {call.size}; "
             f"{' '.join(f'{t:.0f}' for t in call)})"]  # fmt: skip
    for k in range(posts.shape[2]):
        w = waits[:, :, k]
        apart = pair_finishes(posts[:, :, k], dones[:, :, k], 1 << k, gap_ms)
        pairs = posts.shape[0] // 2 * posts.shape[1]
        line = f"  step {k}: wait {np.median(w):6.1f} ms median, {w.max():6.1f} slowest"
        if len(apart):
            line += (f"; {len(apart)}/{pairs} pairs posted >= {gap_ms:g} ms apart, done "
                     f"{np.median(apart[:, 1]):.0f} (early) and {np.median(apart[:, 2]):.0f} "
                     f"(late) ms after the later post")  # fmt: skip
        lines.append(line)
    return "\n".join(lines)


def chain(comm, nbytes: int, calls: int, order: str) -> tuple[np.ndarray, np.ndarray]:
    """This rank's (posts, dones), [call, step] ms from each call's barrier."""
    from mpi4py import MPI

    rank, steps = comm.rank, comm.size.bit_length() - 1
    send = np.ones(nbytes, np.uint8)
    recvs = [np.empty(nbytes, np.uint8) for _ in range(steps)]
    plans = []
    for k in range(steps):
        peer = rank ^ (1 << k)
        recv = comm.Recv_init(recvs[k], source=peer, tag=k)
        send_req = comm.Send_init(send, dest=peer, tag=k)
        plans.append([recv, send_req] if order == "receives-first" else [send_req, recv])
    posts, dones = np.zeros((calls + 1, steps)), np.zeros((calls + 1, steps))
    for c in range(calls + 1):  # call 0 warms the connections up
        comm.Barrier()
        t0 = MPI.Wtime()
        for k, reqs in enumerate(plans):
            posts[c, k] = MPI.Wtime() - t0
            MPI.Prequest.Startall(reqs)
            MPI.Prequest.Waitall(reqs)
            dones[c, k] = MPI.Wtime() - t0
    for reqs in plans:
        for r in reqs:
            r.Free()
    return posts[1:] * 1e3, dones[1:] * 1e3


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size < 2 or comm.size & (comm.size - 1):
        return owncluster.refuse(comm, "exchange_order", f"{comm.size} ranks; run it on a "
                                 "power of two (2, 4, 8 ...)")  # fmt: skip
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {format_size(args.size)} each way a step, {args.calls} "
              f"calls an order, orders alternated {args.rounds} times", flush=True)  # fmt: skip
    for _round in range(args.rounds):
        for order in ORDERS:
            posts, dones = chain(comm, args.size, args.calls, order)
            every = comm.gather((posts, dones), root=0)
            if comm.rank == 0:
                p = np.stack([x[0] for x in every])
                d = np.stack([x[1] for x in every])
                print(summary(order, p, d, args.gap), flush=True)
    return 0


def cluster_spec(nodes: int, nic: str) -> ClusterSpec:
    """The emulated cluster: ``nodes`` (a power of two) of one rank, the deep queue."""
    if nodes < 2 or nodes & (nodes - 1):
        raise UsageError(f"--nodes {nodes}: give a power of two (2, 4, 8 ...)")
    return owncluster.cluster_spec(PREFIX, nodes, 1, nic)


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("exchange_order", __doc__)
    parser.add_argument("--size", type=parse_size, default=1 << 20, help="bytes each way (1M)")
    parser.add_argument("--calls", type=int, default=5, help="calls per order and round (5)")
    parser.add_argument("--rounds", type=int, default=2, help="times the orders alternate (2)")
    parser.add_argument(
        "--gap", type=float, default=5.0, help="pairs posted this many ms apart (5)"
    )
    parser.add_argument("--nodes", type=int, default=8, help="emulated nodes, one rank each (8)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    return owncluster.start(parser, args, worker, lambda: cluster_spec(args.nodes, args.nic),
                            ("size", "calls", "rounds", "gap"))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
