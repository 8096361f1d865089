"""How often the next sender's message into a port busy with a flow costs a timeout.

On the shallow (lossy) queue a spread-out or pairwise all-to-allv pays retransmission
timeouts although each of its steps sends one flow into each port: its ranks drift
apart, and a rank that starts its next step early sends the first fragment of its
message (what the transport sends before the receiver has matched it) into a port still
taking the step before from another rank. This probe measures that alone, as a step
does it (calibrate's ``join`` point, :func:`commbench.model.calibrate.join_rounds`, with
a base and a message size of its own): every rank streams ``--sizes`` bytes to the rank
of its index on the next node and, at a random point of that flow, sends a message
(``--message`` bytes, default the flow's) to a rank of another node, which posts its
receive for it once its flow has arrived: every port takes one flow and, part-way
through, the start of a second sender's message. Each round is timed per receiver until both have arrived; the same
rounds with the message sent only once every flow has arrived are the base. The rounds a
timeout made late stand apart (:func:`commbench.model.calibrate.split_late` over every
round's excess over its mode's median); printed per size: the base, the share of
receivers late without and with the overlap, and by how much.

    python -m commbench.benchmarks.burst_loss [--sizes 128K,512K,1M] [--message BYTES] [--rounds 40]

(root) brings up its own emulated cluster (prefix ``cbb``, 2 nodes x 4 ranks, the
``target-shallow`` queue, ``--nic`` 100mbit), runs and takes it down. The ranks' TCP
counters (``commbench cluster status``) show the timeouts of a run of the collective
itself on such a cluster.
"""

from __future__ import annotations

import sys

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError
from commbench.units import format_size, parse_size

PREFIX = "cbb"


def late_shares(alone: np.ndarray, busy: np.ndarray) -> dict[str, float]:
    """From the rounds' times (ms, any shape) without and with the message part-way:
    ``base`` (the median without), ``late_alone`` and ``late_busy`` (the shares of rounds
    a timeout made late: :func:`~commbench.model.calibrate.split_late` over both sets'
    excesses, each over its own median, as the message part-way ends a round sooner)
    and ``late_by`` (its median excess; 0 where none stands apart)."""
    from commbench.model.calibrate import split_late

    alone, busy = np.asarray(alone, float).ravel(), np.asarray(busy, float).ravel()
    over_alone, over_busy = alone - np.median(alone), busy - np.median(busy)
    split = split_late(np.concatenate([over_alone, over_busy]))
    base = float(np.median(alone))
    if split is None:
        return {"base": base, "late_alone": 0.0, "late_busy": 0.0, "late_by": 0.0}
    threshold, late_by = split
    return {"base": base, "late_alone": float((over_alone > threshold).mean()),
            "late_busy": float((over_busy > threshold).mean()), "late_by": late_by}  # fmt: skip


def report(nbytes: int, shares: dict[str, float], samples: int) -> str:
    return (f"{format_size(nbytes):>6s} flow: {shares['base']:7.1f} ms alone; late by a timeout "
            f"({shares['late_by']:.0f} ms): {shares['late_alone']:.3f} alone, "
            f"{shares['late_busy']:.3f} with the message part-way ({samples} receiver rounds each)")  # fmt: skip


def worker(args) -> int:
    from mpi4py import MPI

    from commbench.model.calibrate import join_rounds

    comm = MPI.COMM_WORLD
    g = args.ranks_per_node
    if comm.size % g or comm.size // g < 2 or comm.size - g < 2:
        if comm.rank == 0:
            print(f"burst_loss: {comm.size} ranks is not 2 or more nodes of {g} with two "
                  "ranks on other nodes", file=sys.stderr)  # fmt: skip
        return 2
    rng = np.random.default_rng(args.seed + comm.rank)
    if comm.rank == 0:
        what = format_size(args.message) if args.message else "the flow's bytes"
        print(f"# {comm.size} ranks ({g} a node), a message of {what} into each port "
              f"part-way through its flow, {args.rounds} rounds", flush=True)  # fmt: skip
    for nbytes in args.sizes:
        message = args.message or nbytes
        alone = join_rounds(comm, g, nbytes, args.rounds, rng, False, message) * 1e3
        busy = join_rounds(comm, g, nbytes, args.rounds, rng, True, message) * 1e3
        if comm.rank == 0:
            print(report(nbytes, late_shares(alone, busy), alone.size), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("burst_loss", __doc__)
    parser.add_argument("--sizes", default="128K,512K,1M", help="flow bytes (128K,512K,1M)")
    parser.add_argument("--message", type=parse_size, default=0,
                        help="the second sender's bytes (default: the flow's)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=40, help="rounds per size and mode (40)")
    parser.add_argument("--ranks-per-node", type=int, default=4, help="ranks (NICs) a node (4)")
    parser.add_argument("--seed", type=int, default=1, help="the message's points in the flow")
    args = parser.parse_args(argv)
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    except (ValueError, UsageError) as exc:
        parser.error(f"--sizes {args.sizes!r}: {exc}")
    if args.rounds < 2 or args.message < 0 or args.ranks_per_node < 1 or min(args.sizes) < 1:
        parser.error("--rounds must be at least 2; --ranks-per-node and every size 1")
    if args.worker:
        return worker(args)
    try:
        spec = owncluster.cluster_spec(PREFIX, 2, args.ranks_per_node, args.nic, "target-shallow")
    except UsageError as exc:
        parser.error(str(exc))
    argv = ["--sizes", ",".join(str(s) for s in args.sizes), "--message", str(args.message),
            "--rounds", str(args.rounds), "--ranks-per-node", str(args.ranks_per_node),
            "--seed", str(args.seed)]  # fmt: skip
    return owncluster.run_worker_or_say(parser.prog, spec, "commbench.benchmarks.burst_loss", argv)


if __name__ == "__main__":
    sys.exit(main())
