"""How the NICs of one step share the fabric cap: the probe behind ``shared_cap_us``.

Every rank sends to the rank of its local index on the next node (a rail ring, one flow
per NIC, what a FAST stage is), timed from a barrier to each receiver's end:

* **k NICs**: k of the NICs send M bytes at once (k = 1, 2, 4, all): the median flow's
  end and the slowest's. One NIC alone gives the NIC's rate, all of them the cap (as
  ``commbench calibrate``'s ``allnics`` point, the slowest rank);
* **unequal**: every NIC sends, a quarter of them M / 2 and the rest M (FAST's first
  stage on zipf 0.99 at 4 MiB on 4x2: six of 1052 KiB, two of 496 KiB): when the small
  ones and the big ones end, beside what the model says from this run's rate and cap -
  the NICs sharing the cap (:func:`commbench.kernels.model.fabric.shared_cap_us`) and one
  cap for the step's bytes (the model before it).

    python -m commbench.benchmarks.shared_cap [--size 1052K] [--repeats 6]

(root) brings up its own emulated cluster (prefix ``cbk``: 4 nodes of 2 ranks, the
``target-deep`` queue, ``--nic`` 100mbit) and takes it down. On an allocation of its own:
``mpiexec -n P python -m commbench.benchmarks.shared_cap --worker --ranks-per-node G``.
"""

from __future__ import annotations

import sys

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError
from commbench.kernels.model.fabric import shared_cap_us
from commbench.units import format_size, parse_size

PREFIX = "cbk"
NODES, RANKS_PER_NODE = 4, 2


def nic_counts(p: int) -> list[int]:
    """The k of the k-NICs probe: 1, 2, 4, ... below p, then p."""
    return sorted({*(k for k in (1, 2, 4) if k < p), p})


def model_line(nbytes: int, alone_ms: float, all_ms: float, sizes: np.ndarray) -> str:
    """What the model says of the unequal step from this run's rate (one NIC alone,
    ``alone_ms`` for ``nbytes``) and cap (every NIC at once, the slowest ``all_ms``)."""
    rate = nbytes / alone_ms  # bytes per ms
    cap = sizes.size * nbytes / all_ms
    if cap >= sizes.size * rate:
        cap = sizes.size * rate  # no cap below the NICs' sum
    ends = shared_cap_us(sizes, sizes / rate, cap)
    small, big = ends[sizes < sizes.max()], ends[sizes == sizes.max()]
    bound = max(sizes.sum() / cap, sizes.max() / rate)
    return (f"model from this run's rate and cap: small {small.max():.1f}, big "
            f"{big.max():.1f} ms (the NICs sharing the cap); {bound:.1f} ms for all (one "
            "cap for the step's bytes)")  # fmt: skip


def rail_peer(rank: int, g: int, nodes: int, hop: int = 1) -> int:
    """The rank of ``rank``'s local index ``hop`` nodes on."""
    return ((rank // g + hop) % nodes) * g + rank % g


def _step(comm, g: int, sizes: list[int], buf: np.ndarray) -> float:
    """One rail-ring step of ``sizes[rank]`` bytes per sender (0: idle): this rank's ms
    from the barrier to the end of its receive (0.0 when it receives nothing)."""
    from mpi4py import MPI

    rank, nodes = comm.rank, comm.size // g
    to, frm = rail_peer(rank, g, nodes), rail_peer(rank, g, nodes, -1)
    comm.Barrier()
    t0 = MPI.Wtime()
    reqs = []
    if sizes[frm]:
        reqs.append(comm.Irecv(buf[1, : sizes[frm]], source=frm, tag=11))
    if sizes[rank]:
        reqs.append(comm.Isend(buf[0, : sizes[rank]], dest=to, tag=11))
    MPI.Request.Waitall(reqs)
    return (MPI.Wtime() - t0) * 1e3 if sizes[frm] else 0.0


def _calls(comm, g: int, sizes: list[int], buf: np.ndarray, repeats: int) -> np.ndarray:
    """``repeats`` calls after a warm one: rank 0 gets a (calls, ranks) array of ms."""
    _step(comm, g, sizes, buf)
    rows = [comm.gather(_step(comm, g, sizes, buf), root=0) for _ in range(repeats)]
    return np.array(rows) if comm.rank == 0 else np.zeros((0, 0))


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    p, g, m = comm.size, args.ranks_per_node, args.size
    if p % g or p // g < 2:
        return owncluster.refuse(comm, "shared_cap", f"{p} ranks of {g} a node; run it on 2 "
                                 "or more nodes of --ranks-per-node ranks")  # fmt: skip
    buf = np.zeros((2, m), dtype=np.uint8)  # send, receive

    def receivers(senders) -> list[int]:
        return [rail_peer(s, g, p // g) for s in senders]

    if comm.rank == 0:
        print(f"# {p // g} nodes x {g}, rail ring, {format_size(m)} a NIC, {args.repeats} "
              "calls each; medians over the calls", flush=True)  # fmt: skip
    ends = {}
    for k in nic_counts(p):
        senders = [i * p // k for i in range(k)]
        t = _calls(comm, g, [m if r in senders else 0 for r in range(p)], buf, args.repeats)
        if comm.rank == 0:
            got = t[:, receivers(senders)]
            ends[k] = float(np.median(got.max(axis=1)))
            print(f"k = {k}: median flow {np.median(got):7.1f} ms, slowest {ends[k]:7.1f}",
                  flush=True)  # fmt: skip
    small = max(1, p // 4)
    sizes = [m // 2 if r >= p - small else m for r in range(p)]
    t = _calls(comm, g, sizes, buf, args.repeats)
    if comm.rank == 0:
        lo, hi = receivers(range(p - small, p)), receivers(range(p - small))
        print(f"unequal ({p - small} x {format_size(m)}, {small} x {format_size(m // 2)}): "
              f"small {np.median(t[:, lo]):.1f} ms, big median {np.median(t[:, hi]):.1f}, "
              f"slowest {np.median(t[:, hi].max(axis=1)):.1f}", flush=True)  # fmt: skip
        print(model_line(m, ends[1], ends[p], np.array(sizes, dtype=np.float64)), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("shared_cap", __doc__)
    parser.add_argument("--size", default="1052K", help="bytes a NIC sends (1052K)")
    parser.add_argument("--repeats", type=int, default=6, help="calls a case (6)")
    parser.add_argument("--ranks-per-node", type=int, default=RANKS_PER_NODE,
                        help=f"with --worker: ranks a node ({RANKS_PER_NODE})")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        args.size = parse_size(args.size)
        if args.size < 2 or args.repeats < 1 or args.ranks_per_node < 1:
            raise UsageError("--size must be at least 2 bytes, --repeats and "
                             "--ranks-per-node at least 1")  # fmt: skip
        spec = None if args.worker else owncluster.cluster_spec(
            PREFIX, NODES, RANKS_PER_NODE, args.nic)  # fmt: skip
    except (UsageError, ValueError) as exc:
        parser.error(str(exc))
    if args.worker:
        return worker(args)
    argv = ["--size", str(args.size), "--repeats", str(args.repeats)]
    return owncluster.run_worker_or_say(parser.prog, spec, "commbench.benchmarks.shared_cap", argv)


if __name__ == "__main__":
    sys.exit(main())
