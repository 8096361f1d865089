"""How often an incast round on the lossy fabric pays a timeout, by the barrier before it.

``commbench calibrate`` reads a port's chance of a retransmission timeout (``loss_late``)
from its ``flows`` rounds, each started after a barrier whose waiting ranks sleep (so
that idle ranks leave the shared cores to the measured ones). The harness's timed loop
(``--timing latency``) starts each call after ``MPI_Barrier``, whose waiting ranks spin
in the MPI library; and a fan-out sends its bytes in P - 1 messages, not in the k
flows of the calibration, posted by ascending rank, so that every rank's first message
goes to the same rank. This probe runs the patterns after both barriers, in turn
(:func:`pattern_rounds`): every rank's time in each round, and the rounds a timeout made
late (:func:`late_counts`, the excesses over the median split where they stand apart as
calibrate splits them; each rank's share too), and the ``incast`` pattern, the
fan-out's burst alone (the ranks of other nodes each sending one fan-out message into
one port at once), whose receiver's late rounds are a port's chance of a timeout in that
burst, and the ``hot`` pattern, a fan-out converging on one rank (``--hot`` times the
message from ``--senders`` ranks of other nodes), whose hot rank's late rounds beside
the others' give a NIC's chance when its senders overfill it (calibrate's ``hot``
points). Printed per pattern and barrier: the median round, the share of (rank, round)
samples late, and the share of rounds with a late rank. On the emulated 4x2 at 1 MiB a
rank the fan-out patterns read alike (ascending 0.23-0.31 of samples late, from the
rank's next 0.22-0.29, ``flows`` 0.26-0.34), and an incast's chance rises steeply with
its length (six senders of 32, 64 and 128 KiB: 0.02-0.11, 0.04-0.33, 0.82-0.96 of
rounds; docs/model-validation-history.md, "Fan-out's shortfall on the shallow queue").

    python -m commbench.benchmarks.barrier_loss [--nodes 4] [--ranks-per-node 2]
        [--bytes 1M] [--rounds 30] [--trials 2]
        [--patterns flows,fanout,rotated,incast,hot] [--hot 2.0] [--senders K]

(root) brings up its own emulated cluster (prefix ``cbq``, the ``target-shallow``
queue, ``--nic`` 100mbit), runs and takes it down.
"""

from __future__ import annotations

import sys

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError
from commbench.model.calibrate import flow_peers, hot_body, hot_marks, rank_rounds, split_late
from commbench.units import format_size, parse_size

PREFIX = "cbq"
PATTERNS = ("flows", "fanout", "rotated", "incast", "hot")
BARRIERS = ("quiet", "spin")


def late_marks(every_ms) -> np.ndarray:
    """Which samples of a ranks x rounds array of times a timeout made late: those whose
    excess over the median stands apart with the others'
    (:func:`~commbench.model.calibrate.split_late`); none where none does."""
    t = np.asarray(every_ms, dtype=np.float64)
    excess = t - np.median(t)
    split = split_late(excess.ravel())
    return excess > split[0] if split is not None else np.zeros(t.shape, dtype=bool)


def late_counts(every_ms) -> tuple[float, float, np.ndarray]:
    """``(late samples, rounds with a late rank, each rank's late rounds)`` (shares) of a
    ranks x rounds array of times (:func:`late_marks`)."""
    late = late_marks(every_ms)
    return float(late.mean()), float(late.any(axis=0).mean()), late.mean(axis=1)


def pattern_rounds(comm, g: int, pattern: str, nbytes: int, rounds: int, barrier: str,
                   hot: float = 2.0, senders: int | None = None):  # fmt: skip
    """Every rank's seconds in each of ``rounds`` rounds (ranks x rounds) of ``pattern``:
    ``flows``, calibrate's (``nbytes`` split over the P - G ranks of other nodes,
    :func:`~commbench.model.calibrate.flow_peers`), ``fanout`` (``nbytes / P`` to
    every other rank, its node's too, posted by ascending rank as the harness's
    ``fanout`` posts them: every rank's first message goes to rank 0 or 1) or
    ``rotated`` (the same messages posted from the rank's next, ``rank + 1``, round),
    ``hot`` (calibrate's :func:`~commbench.model.calibrate.hot_body`: the fan-out, its
    round's hot rank, round ``i``'s ``i mod P``, taking ``hot`` times the message from
    ``senders`` ranks of other nodes, all where None; they converge on it, warm, once
    their other messages are through),
    or ``incast`` (the ranks of other nodes each send ``nbytes / P``, a fan-out's
    message, to one rank, a fan-out's burst into one port at its start; the rank
    taking them is round ``i``'s ``i mod P``, the others idle), receives posted first;
    each round after
    calibrate's sleeping barrier (``quiet``) or ``MPI_Barrier`` (``spin``). Collective."""
    from mpi4py import MPI

    p, rank = comm.size, comm.rank
    nodes, k = p // g, p - g
    turn = [0]  # the incast round's receiver
    if pattern == "incast":
        part = max(nbytes // p, 1)
        send, recv = np.ones(part, np.uint8), np.empty((p, part), np.uint8)

        def body() -> None:
            target = turn[0] % p
            turn[0] += 1
            if rank == target:
                reqs = [comm.Irecv(recv[s], source=s, tag=14) for s in range(p)
                        if s // g != target // g]  # fmt: skip
                MPI.Request.Waitall(reqs)
            elif rank // g != target // g:
                comm.Send(send, dest=target, tag=14)

        body()  # the connections into rank 0, warm
        turn[0] = 0
        return rank_rounds(comm, body, rounds, comm.Barrier if barrier == "spin" else None)
    if pattern == "hot":
        part = max(nbytes // p, 1)
        body, restart = hot_body(comm, g, senders or p - g, part, max(int(part * hot), 1))
        body()
        restart()
        return rank_rounds(comm, body, rounds, comm.Barrier if barrier == "spin" else None)
    if pattern == "flows":
        to = flow_peers(rank, nodes, g, k)
        frm = [r for r in range(p) if rank in flow_peers(r, nodes, g, k)]
        part = max(nbytes // k, 1)
    else:
        to = frm = [r for r in range(p) if r != rank]
        if pattern == "rotated":
            to = [(rank + j) % p for j in range(1, p)]
            frm = [(rank - j) % p for j in range(1, p)]
        part = max(nbytes // p, 1)
    send, recv = np.ones(part, np.uint8), np.empty((len(frm), part), np.uint8)

    def body() -> None:
        reqs = [comm.Irecv(recv[i], source=s, tag=13) for i, s in enumerate(frm)]
        reqs += [comm.Isend(send, dest=d, tag=13) for d in to]
        MPI.Request.Waitall(reqs)

    body()  # the connections, warm
    return rank_rounds(comm, body, rounds, comm.Barrier if barrier == "spin" else None)


def receivers(every_ms) -> np.ndarray:
    """An ``incast`` pattern's times of the rank that took each round's incast (round
    ``i``'s rank ``i mod P``), one row."""
    t = np.asarray(every_ms, dtype=np.float64)
    return t.T[hot_marks(t.shape).T][None, :]  # in round order


def report(pattern: str, barrier: str, trial: int, every_ms, nbytes: int) -> str:
    """One line: for ``incast`` the receivers' rounds alone (:func:`receivers`), a
    port's chance; for ``hot`` the hot ranks' share beside the others'."""
    if pattern == "hot":
        t = np.asarray(every_ms, dtype=np.float64)
        hot = hot_marks(t.shape)
        late = late_marks(t)
        return (f"hot    after a {barrier:5s} barrier, trial {trial}: {format_size(nbytes)} a "
                f"rank, median {np.median(t):7.1f} ms; late by a timeout: the hot rank "
                f"{late[hot].mean():.3f} of {t.shape[1]} rounds, the others "
                f"{late[~hot].mean():.3f}")  # fmt: skip
    if pattern == "incast":
        every_ms = receivers(every_ms)
    late, rounds, by_rank = late_counts(every_ms)
    ranks = "" if by_rank.size < 2 else " (by rank " + " ".join(f"{x:.2f}" for x in by_rank) + ")"
    return (f"{pattern:6s} after a {barrier:5s} barrier, trial {trial}: {format_size(nbytes)} a "
            f"rank, median {np.median(every_ms):7.1f} ms; late by a timeout: {late:.3f} of "
            f"{np.size(every_ms)} samples{ranks}, {rounds:.2f} of rounds")  # fmt: skip


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    g = args.ranks_per_node
    if comm.size % g or comm.size // g < 2:
        return owncluster.refuse(comm, "barrier_loss", f"{comm.size} ranks is not 2 or more "
                                 f"nodes of {g}")  # fmt: skip
    if comm.rank == 0:
        print(f"# {comm.size} ranks ({g} a node), {args.rounds} rounds a pattern, barrier "
              f"and trial", flush=True)  # fmt: skip
    for trial in range(args.trials):
        for pattern in args.patterns:
            for barrier in BARRIERS:
                every = pattern_rounds(comm, g, pattern, args.bytes, args.rounds, barrier,
                                       args.hot, args.senders or None) * 1e3  # fmt: skip
                if comm.rank == 0:
                    print(report(pattern, barrier, trial, every, args.bytes), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("barrier_loss", __doc__)
    parser.add_argument("--nodes", type=int, default=4, help="nodes (4)")
    parser.add_argument("--ranks-per-node", type=int, default=2, help="ranks (NICs) a node (2)")
    parser.add_argument("--bytes", default="1M", help="bytes a rank sends a round (1M)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds per pattern and barrier")
    parser.add_argument("--trials", type=int, default=2, help="passes over the list (2)")
    parser.add_argument(
        "--hot",
        type=float,
        default=2.0,
        help="hot: the round's hot rank's messages over the others' (2.0)",
    )
    parser.add_argument("--senders", type=int, default=0,
                        help="hot: how many ranks of other nodes send the larger message "
                             "(0: all)")  # fmt: skip
    parser.add_argument(
        "--patterns",
        default=",".join(PATTERNS),
        help=f"patterns to run, comma-separated ({','.join(PATTERNS)})",
    )
    args = parser.parse_args(argv)
    try:
        args.bytes = parse_size(args.bytes)
    except (ValueError, UsageError) as exc:
        parser.error(f"--bytes {args.bytes!r}: {exc}")
    args.patterns = [x for x in args.patterns.split(",") if x]
    if not args.patterns or set(args.patterns) - set(PATTERNS):
        parser.error(f"--patterns {','.join(args.patterns)!r}: each one of {', '.join(PATTERNS)}")
    if not args.hot >= 1:
        parser.error(f"--hot {args.hot}: must be at least 1")
    if not 0 <= args.senders <= (args.nodes - 1) * args.ranks_per_node:
        parser.error(f"--senders {args.senders}: 0 (all) to the other nodes' ranks "
                     f"({(args.nodes - 1) * args.ranks_per_node})")  # fmt: skip
    if args.rounds < 2 or args.trials < 1 or args.bytes < 1:
        parser.error("--rounds must be at least 2, --trials and --bytes at least 1")
    if args.nodes < 2 or args.ranks_per_node < 1:
        parser.error("--nodes must be at least 2 and --ranks-per-node at least 1")
    return owncluster.start(
        parser, args, worker,
        lambda: owncluster.cluster_spec(PREFIX, args.nodes, args.ranks_per_node, args.nic,
                                        "target-shallow"),
        ("ranks_per_node", "bytes", "rounds", "trials", "patterns", "hot", "senders"),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
