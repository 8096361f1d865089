"""How much of a small timed call is the barrier before it: ``MPI_Barrier``'s exit skew.

The harness's latency timing puts a barrier before every call and each rank times the
call from its own exit; the slowest rank's time is reported. Ranks leave a barrier at
different times, so the rank out first starts its clock early and waits for partners
still leaving: that wait is in the measured call, while the cost model starts every
rank together. Here, after each barrier, every rank runs recursive doubling's exchanges
(``--size`` bytes with r XOR 2^k, sends posted first as the cpu transport does, nothing
reduced) and notes its barrier exit and its end on the host's monotonic clock. Per call:
the exit skew (last rank out less first), the call by the harness's clock (slowest rank,
each from its own exit) and the call from the last rank's exit; printed as median and
quartiles over calls, per round.

    python -m commbench.benchmarks.barrier_skew [--nodes 8] [--size 256] [--calls 40] [--rounds 3]

(root) brings up its own emulated cluster (prefix ``cbs``, one rank per node, the
``target-deep`` queue, ``--nic`` 100mbit), runs and takes it down. The ranks' clocks must
be one clock: ``mpiexec -n P python -m commbench.benchmarks.barrier_skew --worker`` runs
on one host only (the emulated cluster's namespaces share its kernel; ranks on different
hosts are refused). ``MPI_Wtime`` will not do even there: Open MPI's counts from each
process's own start (offsets of ~200 ms between the emulated nodes).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError
from commbench.units import format_size, parse_size

PREFIX = "cbs"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def summary(exits: np.ndarray, ends: np.ndarray) -> dict[str, np.ndarray]:
    """Per call, in us, from ``exits`` and ``ends`` ([rank, call] seconds on one clock):
    ``skew`` (last exit less first), ``harness`` (the slowest rank's end less its own
    exit) and ``from_last`` (the last end less the last exit)."""
    return {
        "skew": (exits.max(axis=0) - exits.min(axis=0)) * 1e6,
        "harness": (ends - exits).max(axis=0) * 1e6,
        "from_last": (ends.max(axis=0) - exits.max(axis=0)) * 1e6,
    }


def report(stats: dict[str, np.ndarray]) -> str:
    """One line: each quantity's median and quartiles over calls."""

    def q(a: np.ndarray) -> str:
        lo, mid, hi = np.percentile(a, [25, 50, 75])
        return f"{mid:.0f} us ({lo:.0f}-{hi:.0f})"

    return (f"exit skew {q(stats['skew'])}; call by the harness's clock {q(stats['harness'])}, "
            f"from the last rank's exit {q(stats['from_last'])}")  # fmt: skip


def calls(comm, nbytes: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's barrier exits and call ends (seconds, the monotonic clock), ``n`` calls
    after one warm-up."""
    from mpi4py import MPI

    rank, steps = comm.rank, comm.size.bit_length() - 1
    send = np.ones(nbytes, np.uint8)
    recvs = [np.empty(nbytes, np.uint8) for _ in range(steps)]
    plans = [[comm.Send_init(send, dest=rank ^ (1 << k), tag=k),
              comm.Recv_init(recvs[k], source=rank ^ (1 << k), tag=k)] for k in range(steps)]  # fmt: skip
    exits, ends = np.zeros(n + 1), np.zeros(n + 1)
    for c in range(n + 1):
        comm.Barrier()
        exits[c] = time.monotonic()
        for reqs in plans:
            MPI.Prequest.Startall(reqs)
            MPI.Prequest.Waitall(reqs)
        ends[c] = time.monotonic()
    for reqs in plans:
        for r in reqs:
            r.Free()
    return exits[1:], ends[1:]


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    boots = comm.allgather(BOOT_ID.read_text().strip() if BOOT_ID.exists() else None)
    problem = None
    if comm.size < 2 or comm.size & (comm.size - 1):
        problem = f"{comm.size} ranks; run it on a power of two (2, 4, 8 ...)"
    elif None in boots or len(set(boots)) > 1:
        problem = ("its ranks are on different hosts, whose clocks are not one clock; run it "
                   "on one host (the emulated cluster's nodes share one)")  # fmt: skip
    if problem:
        return owncluster.refuse(comm, "barrier_skew", problem)
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {format_size(args.size)} each way a step, "
              f"{args.calls} calls a round", flush=True)  # fmt: skip
    for _round in range(args.rounds):
        exits, ends = calls(comm, args.size, args.calls)
        every = comm.gather((exits, ends), root=0)
        if comm.rank == 0:
            stats = summary(np.stack([e for e, _ in every]), np.stack([d for _, d in every]))
            print(report(stats), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("barrier_skew", __doc__)
    parser.add_argument("--size", type=parse_size, default=256, help="bytes each way (256)")
    parser.add_argument("--calls", type=int, default=40, help="timed calls per round (40)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    parser.add_argument("--nodes", type=int, default=8, help="emulated nodes, one rank each (8)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1 or args.size < 1:
        parser.error("--size, --calls and --rounds must be at least 1")

    def spec():
        if args.nodes < 2 or args.nodes & (args.nodes - 1):
            raise UsageError(f"--nodes {args.nodes}: give a power of two (2, 4, 8 ...)")
        return owncluster.cluster_spec(PREFIX, args.nodes, 1, args.nic)

    return owncluster.start(parser, args, worker, spec, ("size", "calls", "rounds"))


if __name__ == "__main__":
    sys.exit(main())
