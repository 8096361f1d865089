"""How early a send completes, and how a NIC splits between the old flow and the next one.

Two probes between two nodes (rank 0 on node 0, ranks G and G + 1 on node 1, each rank
its own NIC), both timed from a barrier, what spread-out's steps meet; ``commbench
calibrate`` measures both at one size each (its ``release`` and ``overlap`` points, the
same code) for the model's flow-level spread-out (docs/cost-model.md), this at several:

* **release**: rank 0 sends M bytes to rank G. Its ``Send`` returns when the bytes are in
  the node's buffers, not when they have arrived; ``in flight`` is the share of M still on
  its way then (M x (arrival - release) / arrival).
* **overlap**: as soon as that ``Send`` returns, rank 0 sends another M bytes to rank
  G + 1. The first message's arrival against the same message alone, and how much of the
  first was queued on the NIC ahead of the second, if those bytes left first and the two
  then split the NIC evenly (from its bytes left at the release, at the rate it had
  alone, and the time it then took).

* **train**: rank 0 sends M to k ranks of node 1 in turn (k = 2 .. ``--train``), each
  ``Send`` as soon as the last returned: when each send returned and each message
  arrived (docs/model-validation-history.md, "What a NIC has queued goes first"; the model has
  since taken a NIC's flows in turn, "A NIC sends its flows in turn": in a running
  spread-out senders leave later than these sends return, and their next flow waits).

The two modes alternate, ``--repeats`` calls each per round, two rounds; medians; the
trains after them, ``--repeats`` calls each.

    python -m commbench.benchmarks.nic_overlap [--sizes 256K,512K,1M,4M] [--repeats 4]
        [--train 4]

(root) brings up its own emulated cluster (prefix ``cbo``: 2 nodes of ``--train`` ranks
(at least 2), the ``target-deep`` queue, ``--nic`` 100mbit) and takes it down. On an
allocation of its own: ``mpiexec -n 2G python -m commbench.benchmarks.nic_overlap
--worker`` with G ranks a node (trains of up to G messages).
"""

from __future__ import annotations

import sys

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError
from commbench.model.calibrate import in_flight, queued_ahead, send_release, send_train
from commbench.units import format_size, parse_size

PREFIX = "cbo"
MODES = ("alone", "overlap")


def report(nbytes: int, alone: np.ndarray, overlap: np.ndarray) -> str:
    """One line per size from the calls' (release, first, second) rows, ms."""
    a, o = np.median(alone, axis=0), np.median(overlap, axis=0)
    flight = in_flight(nbytes, a[0], a[1])
    split = ("the first was through before the second started" if o[1] <= o[0] else
            f"{queued_ahead(nbytes, a[1], o[0], o[1]) / 1024:.0f} KiB of the first queued "
            "ahead of the second")  # fmt: skip
    return (f"{format_size(nbytes):>5s}: alone {a[1]:7.1f} ms, send returned at {a[0]:5.1f} "
            f"with {flight / 1024:.0f} KiB in flight; with a second after it: first "
            f"{o[1]:7.1f}, second {o[2]:7.1f} ms, {split}")  # fmt: skip


def train_report(nbytes: int, rows: list[tuple]) -> str:
    """One line per train from its calls' ``(returns, arrivals)``, ms (medians)."""
    returns = np.median([r[0] for r in rows], axis=0)
    arrivals = np.median([r[1] for r in rows], axis=0)
    return (f"{format_size(nbytes):>5s} x {len(returns)}: sends returned at "
            f"{', '.join(f'{t:.1f}' for t in returns)}; arrived at "
            f"{', '.join(f'{t:.1f}' for t in arrivals)} ms")  # fmt: skip


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    g = comm.size // 2
    if comm.size < 4 or comm.size % 2:
        return owncluster.refuse(comm, "nic_overlap", f"{comm.size} ranks; run it on 2 nodes "
                                 "of at least 2 ranks (an even count, 4 or more)")  # fmt: skip
    if comm.rank == 0:
        print(f"# rank 0 (node 0) -> ranks {g} and {g + 1} (node 1); {args.repeats} calls a "
              f"mode and round, 2 rounds; medians", flush=True)  # fmt: skip
    for nbytes in args.sizes:
        rows: dict[str, list] = {m: [] for m in MODES}
        for _round in range(2):
            for mode in MODES:
                second = g + 1 if mode == "overlap" else None
                send_release(comm, nbytes, g, second)  # the connection warm
                for _ in range(args.repeats):
                    row = send_release(comm, nbytes, g, second)
                    if row is not None:
                        rows[mode].append(row)
        if comm.rank == 0:
            print(report(nbytes, np.array(rows["alone"]), np.array(rows["overlap"])), flush=True)
    for nbytes in args.sizes:
        for k in range(2, min(args.train, g) + 1):
            dests = list(range(g, g + k))
            send_train(comm, nbytes, dests)  # the connections warm
            trains = [send_train(comm, nbytes, dests) for _ in range(args.repeats)]
            if comm.rank == 0:
                print(train_report(nbytes, trains), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = owncluster.probe_parser("nic_overlap", __doc__)
    parser.add_argument(
        "--sizes", default="256K,512K,1M,4M", help="message sizes (256K,512K,1M,4M)"
    )
    parser.add_argument("--repeats", type=int, default=4, help="calls a mode and round (4)")
    parser.add_argument("--train", type=int, default=4,
                        help="longest train of messages sent in turn (4; 1: none)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
        if min(args.sizes) < 1 or args.repeats < 1 or args.train < 1:
            raise UsageError(
                "--sizes must be at least 1 byte each, --repeats and --train at least 1"
            )
    except (UsageError, ValueError) as exc:
        parser.error(str(exc))
    return owncluster.start(
        parser, args, worker,
        lambda: owncluster.cluster_spec(PREFIX, 2, max(2, args.train), args.nic),
        ("sizes", "repeats", "train"),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
