"""Does a timed call find the NICs' token buckets full? A small all-reduce after calls
that leave them full and after calls like itself.

The emulated NICs are token buckets (tc tbf, ``scaleout_burst_bytes`` deep): after an idle
spell a message's first bytes pass at once. The harness's latency timing runs the same
call again and again, a barrier between calls, so a call finds what the previous one
left plus what refilled since. Here every timed ``MPI_Allreduce`` of ``--size`` bytes
(float32 sum: the library's own algorithm) follows ``--before`` untimed calls, each
after a barrier as in the harness: of ``--rest-size`` bytes (too few to drain a bucket,
so the buckets fill) or of ``--size`` (the timed loop's own state). The two modes take
turns, one timed call each; per mode the slowest rank's time of each call, median and
quartiles, and their ratio (the harness reports the slowest rank's mean over its calls,
which can read lower); then, over every rank, the time from a call's end to the next
one's start (the barrier the model's loop refills through).

    python -m commbench.benchmarks.bucket_state [--nodes 8] [--ranks-per-node 1] [--size 4K]
        [--before 10] [--calls 40]

(root) brings up its own emulated cluster (prefix ``cbr``, ``--ranks-per-node`` ranks
on each node, each with its NIC; the ``target-deep`` queue, ``--nic`` 100mbit), runs
and takes it down; ``--worker`` runs under a launcher already. With several ranks per
node Open MPI's all-reduce is HAN.
"""

from __future__ import annotations

import sys

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError
from commbench.units import format_size, parse_size

PREFIX = "cbr"


def quartiles(times_us: np.ndarray) -> str:
    lo, mid, hi = np.percentile(times_us, [25, 50, 75])
    return f"{mid:.0f} us ({lo:.0f}-{hi:.0f})"


def report(nbytes: int, rest: int, before: int, rested: np.ndarray, steady: np.ndarray) -> str:
    """Two lines (per mode, its calls' median and quartiles) and their ratio."""
    ratio = float(np.median(steady) / np.median(rested))
    return (
        f"{format_size(nbytes)} after {before} calls of {format_size(rest)}: "
        f"{quartiles(rested)}\n"
        f"{format_size(nbytes)} after {before} calls of {format_size(nbytes)}: "
        f"{quartiles(steady)}\n"
        f"ratio (median) {ratio:.2f}"
    )


def timed_calls(comm, nbytes: int, rest: int, before: int, calls: int) -> dict:
    """The slowest rank's seconds of each timed call, by the size of the calls before it
    (``rest`` and ``nbytes``), and under ``"gap"`` this rank's seconds from the end of
    the call before a timed one of the loop's own state to its start: the barrier
    between two calls as a rank sees it."""
    from mpi4py import MPI

    bufs = {s: (np.ones(s // 4, np.float32), np.empty(s // 4, np.float32))
            for s in (rest, nbytes)}  # fmt: skip
    for send, recv in bufs.values():  # connections up, buffers touched
        comm.Allreduce(send, recv)
    times: dict = {rest: [], nbytes: [], "gap": []}
    for _ in range(calls):
        for prior in (rest, nbytes):
            for _ in range(before):
                comm.Barrier()
                comm.Allreduce(*bufs[prior])
            ended = MPI.Wtime()
            comm.Barrier()
            t0 = MPI.Wtime()
            comm.Allreduce(*bufs[nbytes])
            times[prior].append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
            if prior == nbytes:
                times["gap"].append(t0 - ended)
    return {k: np.array(v) for k, v in times.items()}


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size < 2:
        return owncluster.refuse(comm, "bucket_state", "1 rank; run it on 2 or more")
    times = timed_calls(comm, args.size, args.rest_size, args.before, args.calls)
    gaps = comm.gather(times["gap"], root=0)
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {args.calls} timed calls per mode", flush=True)
        print(report(args.size, args.rest_size, args.before, times[args.rest_size] * 1e6,
                     times[args.size] * 1e6), flush=True)  # fmt: skip
        print(f"a rank's end of a call to its next start (the barrier between): "
              f"{quartiles(np.concatenate(gaps) * 1e6)}", flush=True)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("bucket_state", __doc__)
    parser.add_argument("--size", type=parse_size, default=4096, help="timed bytes (4K)")
    parser.add_argument("--rest-size", type=parse_size, default=64,
                        help="bytes of the calls that let the buckets fill (64)")  # fmt: skip
    parser.add_argument("--before", type=int, default=10, help="untimed calls before each (10)")
    parser.add_argument("--calls", type=int, default=40, help="timed calls per mode (40)")
    parser.add_argument("--nodes", type=int, default=8, help="emulated nodes (8)")
    parser.add_argument("--ranks-per-node", type=int, default=1, help="ranks per node (1)")
    args = parser.parse_args(argv)
    if min(args.size, args.rest_size, args.before, args.calls) < 1:
        parser.error("--size, --rest-size, --before and --calls must be at least 1")
    if args.size % 4 or args.rest_size % 4:
        parser.error("--size and --rest-size are float32 buffers: give multiples of 4 bytes")
    if args.rest_size >= args.size:
        parser.error(f"--rest-size {args.rest_size} must be below --size {args.size}")

    def spec():
        if args.nodes < 2:
            raise UsageError(f"--nodes {args.nodes}: give 2 or more")
        if args.ranks_per_node < 1:
            raise UsageError(f"--ranks-per-node {args.ranks_per_node}: give 1 or more")
        return owncluster.cluster_spec(PREFIX, args.nodes, args.ranks_per_node, args.nic)

    return owncluster.start(parser, args, worker, spec,
                            ("size", "rest_size", "before", "calls"))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
