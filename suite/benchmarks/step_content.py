"""What a step's message and its reduction add to an empty step, ring and butterfly.

calibrate prices a host-driven all-reduce's steps with bare ones (``ring_step_us``:
calls of steps around the ring, empty until this probe showed a message costs the ring
~10 us a step more on 4x2, now of a 32 B message; ``butterfly_step_us``: chains of
empty exchanges).
The algorithms' steps carry a message and, in their reducing half, a reduction. Here,
after a barrier, every rank runs a call of the ring's 2(P-1) steps (to rank + 1, from
rank - 1) or of recursive doubling's log2 P exchanges (with r XOR 2^k), bound once as
persistent requests as both calibrate and the suite's baselines post them, in three
variants interleaved call by call:

- ``empty``: no bytes;
- ``message``: ``--size`` bytes a step (the ring's message of a 256 B all-reduce on 8
  ranks is 32 B);
- ``reduce``: the same, and a bound reduction of what came (``--dtype``) after each
  step of the reducing half (the ring's first P-1 steps, every exchange).

Per pattern and variant the median call (the slowest rank's) and its quartiles, then
what the message adds a step and what a reduction adds a reducing step.

    python -m commbench.benchmarks.step_content [--nodes 4] [--ranks-per-node 2] [--size 32] [--calls 60]

(root) brings up its own emulated cluster (prefix ``cbc``, the ``target-deep`` queue,
``--nic`` 100mbit), runs and takes it down; ``mpiexec -n P python -m
commbench.benchmarks.step_content --worker`` runs under a launcher already.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError
from commbench.harness.backends.dtypes import parse_dtype
from commbench.units import parse_size

PREFIX = "cbc"
VARIANTS = ("empty", "message", "reduce")
PATTERNS = ("ring", "recursive-doubling")


def steps(pattern: str, rank: int, size: int) -> list[tuple[int, int, bool]]:
    """``(send to, receive from, reduces)`` of each step of ``pattern`` on ``size`` ranks."""
    if pattern == "ring":
        right, left = (rank + 1) % size, (rank - 1) % size
        return [(right, left, k < size - 1) for k in range(2 * (size - 1))]
    return [(rank ^ (1 << k),) * 2 + (True,) for k in range(size.bit_length() - 1)]


def added_us(medians: dict[str, float], nsteps: int, reducing: int) -> tuple[float, float]:
    """What the message adds a step and what the reduction adds a reducing step (us),
    from the three variants' median calls."""
    message = (medians["message"] - medians["empty"]) / nsteps
    return message, (medians["reduce"] - medians["message"]) / reducing


def _plans(comm, pattern: str, variant: str, nbytes: int, dtype):
    from mpi4py import MPI

    from commbench.kernels.reduce import bind_reduce

    size = 0 if variant == "empty" else nbytes // dtype.itemsize
    out = []
    for k, (dst, src, reduces) in enumerate(steps(pattern, comm.rank, comm.size)):
        send, recv = np.ones(size, dtype), np.ones(size, dtype)
        reqs = [comm.Send_init([send.view(np.uint8), MPI.BYTE], dest=dst, tag=k),
                comm.Recv_init([recv.view(np.uint8), MPI.BYTE], source=src, tag=k)]  # fmt: skip
        red = (
            bind_reduce(np, send, send, recv, "sum", dtype)
            if variant == "reduce" and reduces
            else None
        )
        out.append((reqs, red))
    return out


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size < 2 or comm.size & (comm.size - 1):
        return owncluster.refuse(
            comm, "step_content", f"{comm.size} ranks; run it on a power of two"
        )
    dtype = parse_dtype(args.dtype)
    plans = {(p, v): _plans(comm, p, v, args.size, dtype) for p in PATTERNS for v in VARIANTS}
    times: dict = {key: [] for key in plans}
    for call in range(args.calls + 2):  # two warm-ups
        for key, plan in plans.items():
            comm.Barrier()
            start = time.perf_counter()
            for reqs, red in plan:
                MPI.Prequest.Startall(reqs)
                MPI.Prequest.Waitall(reqs)
                if red is not None:
                    red()
            slowest = comm.allreduce((time.perf_counter() - start) * 1e6, op=MPI.MAX)
            if call >= 2:
                times[key].append(slowest)
    for plan in plans.values():
        for reqs, _ in plan:
            for r in reqs:
                r.Free()
    if comm.rank == 0:
        print(f"# {comm.size} ranks, {args.size} B {args.dtype} a message, {args.calls} calls "
              "a variant; the slowest rank's call, median (quartiles)", flush=True)  # fmt: skip
        for pattern in PATTERNS:
            pattern_steps = steps(pattern, 0, comm.size)
            med = {v: float(np.median(times[(pattern, v)])) for v in VARIANTS}
            cells = []
            for v in VARIANTS:
                lo, hi = np.percentile(times[(pattern, v)], [25, 75])
                cells.append(f"{v} {med[v]:.1f} ({lo:.1f}-{hi:.1f})")
            message, reduction = added_us(med, len(pattern_steps), sum(s[2] for s in pattern_steps))
            print(f"{pattern} ({len(pattern_steps)} steps): " + ", ".join(cells)
                  + f" | a message {message:+.1f} us a step, a reduction {reduction:+.1f}",
                  flush=True)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("step_content", __doc__)
    parser.add_argument("--nodes", type=int, default=4, help="emulated nodes (4)")
    parser.add_argument("--ranks-per-node", type=int, default=2, help="ranks per node (2)")
    parser.add_argument("--size", type=parse_size, default=32, help="bytes a message (32)")
    parser.add_argument("--dtype", default="bfloat16", help="the reduction's type (bfloat16)")
    parser.add_argument("--calls", type=int, default=60, help="calls a variant (60)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.size < 1 or args.ranks_per_node < 1:
        parser.error("--calls, --size and --ranks-per-node must be at least 1")
    try:
        itemsize = parse_dtype(args.dtype).itemsize
    except UsageError as exc:
        parser.error(f"--dtype: {exc}")
    if args.size % itemsize:
        parser.error(f"--size {args.size}: give a multiple of {args.dtype}'s {itemsize} bytes")

    def spec():
        ranks = args.nodes * args.ranks_per_node
        if args.nodes < 2 or ranks & (ranks - 1):
            raise UsageError(f"--nodes {args.nodes} x --ranks-per-node {args.ranks_per_node}: "
                             "give 2 or more nodes and a power of two ranks")  # fmt: skip
        return owncluster.cluster_spec(PREFIX, args.nodes, args.ranks_per_node, args.nic)

    return owncluster.start(parser, args, worker, spec, ("size", "dtype", "calls"))


if __name__ == "__main__":
    sys.exit(main())
