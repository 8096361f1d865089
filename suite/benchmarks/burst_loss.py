"""How often the next sender's message into a port busy with a flow costs a timeout.

On the shallow (lossy) queue a spread-out or pairwise all-to-allv pays retransmission
timeouts although each of its steps sends one flow into each port: its ranks drift
apart, and a rank that starts its next step early sends the first fragment of its
message (what the transport sends before the receiver has matched it) into a port still
taking the step before from another rank. This probe measures that alone, as a step
does it (:func:`join_rounds`): every rank streams ``--sizes`` bytes to the rank
of its index on the next node and, at a random point of that flow, sends a message
(``--message`` bytes, default the flow's) to a rank of another node, which posts its
receive for it once its flow has arrived: every port takes one flow and, part-way
through, the start of a second sender's message. Each round is timed per receiver until both have arrived; the same
rounds with the message sent only once every flow has arrived are the base. The rounds a
timeout made late stand apart (:func:`commbench.model.calibrate.split_late` over every
round's excess over its mode's median); printed per size: the base, the share of
receivers late without and with the overlap, and by how much.

    python -m commbench.benchmarks.burst_loss [--sizes 128K,512K,1M] [--message BYTES] [--rounds 40]
        [--spreadout 1M,8M] [--calls 10]

(root) brings up its own emulated cluster (prefix ``cbb``, 2 nodes x 4 ranks, the
``target-shallow`` queue, ``--nic`` 100mbit), runs and takes it down. Then, on the same
cluster, it runs a uniform spread-out all-to-allv (``commbench run``) of each
``--spreadout`` size a rank and prints the retransmission timeouts it paid a call by the
nodes' TCP counters (``commbench cluster status`` shows them): what the joins cost the
collective itself.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from commbench.benchmarks import owncluster
from commbench.errors import UsageError
from commbench.model.calibrate import flow_peers, split_late
from commbench.units import format_size, parse_size

PREFIX = "cbb"


def late_shares(alone: np.ndarray, busy: np.ndarray) -> dict[str, float]:
    """From the rounds' times (ms, any shape) without and with the message part-way:
    ``base`` (the median without), ``late_alone`` and ``late_busy`` (the shares of rounds
    a timeout made late: :func:`~commbench.model.calibrate.split_late` over both sets'
    excesses, each over its own median, as the message part-way ends a round sooner)
    and ``late_by`` (its median excess; 0 where none stands apart)."""

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


def timeouts_per_call(before: dict[int, dict[str, int]], after: dict[int, dict[str, int]],
                      calls: int) -> float:  # fmt: skip
    """Retransmission timeouts a call, all nodes together, from the nodes' TCP counters
    (:func:`commbench.cluster.netns.tcp_counters`) before and after ``calls`` calls."""
    return sum(after[n]["timeouts"] - before[n]["timeouts"] for n in after) / calls


def spreadout_timeouts(sizes: list[int], calls: int):
    """``then`` for :func:`owncluster.run_worker`: a uniform spread-out all-to-allv of
    each size a rank (``commbench run``, ``calls`` timed calls and one warm-up) on the
    probe's cluster, and the timeouts it paid a call by the nodes' counters."""

    def run(spec, folder: Path) -> int:
        from commbench.cluster import netns

        with tempfile.TemporaryDirectory() as tmp:
            for size in sizes:
                before = netns.tcp_counters(spec)
                cmd = [sys.executable, "-m", "commbench", "cluster", "exec", "--prefix",
                       spec.prefix, "--state", str(folder), "--timeout", "600", "--",
                       "commbench", "run", "alltoallv", "--impl", "spreadout", "-b", str(size),
                       "-e", str(size), "--workload", "uniform", "--timing", "latency",
                       "-n", str(calls), "-w", "1", "--out", str(Path(tmp) / "spreadout.jsonl")]  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=660)
                if proc.returncode:
                    print(proc.stderr.strip()[-1500:], file=sys.stderr)
                    return proc.returncode
                per_call = timeouts_per_call(before, netns.tcp_counters(spec), calls + 1)
                print(f"spread-out, uniform, {format_size(size)} a rank: {per_call:.2f} "
                      f"retransmission timeouts a call ({calls + 1} calls, the nodes' TCP "
                      "counters)", flush=True)  # fmt: skip
        return 0

    return run


def join_rounds(comm, g: int, nbytes: int, n: int, rng, part_way: bool = True,
                message: int | None = None) -> np.ndarray:  # fmt: skip
    """Every rank's seconds in each of ``n`` rounds (ranks x rounds) of the probe's
    pattern: every rank streams ``nbytes`` to its first
    :func:`~commbench.model.calibrate.flow_peers` peer (the
    rank of its index on the next node) and sends a message (``message`` bytes, default
    ``nbytes``: a step after a step) to its second, a rank of another node, at a random
    point of its flow (``part_way``) or, for a base, once every flow has arrived; each
    rank posts the message's receive once its flow has arrived, as a step after a step
    does. A round is timed per rank until both have arrived: with the message part-way
    every port takes one flow and, part-way through, the start of a second sender's
    message, as the ports of a spread-out whose ranks have drifted apart do."""
    from mpi4py import MPI

    p, rank = comm.size, comm.rank
    nodes = p // g
    to = flow_peers(rank, nodes, g, 2)
    frm = [next(r for r in range(p) if flow_peers(r, nodes, g, 2)[j] == rank) for j in (0, 1)]
    flow, flow_in = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    size = nbytes if message is None else message
    msg, msg_in = np.ones(size, np.uint8), np.empty(size, np.uint8)

    def one(at: float) -> tuple[float, float]:
        """(seconds until the flow arrived, until the message did)"""
        comm.Barrier()
        t0 = MPI.Wtime()
        got = comm.Irecv(flow_in, source=frm[0], tag=11)
        sends = [comm.Isend(flow, dest=to[0], tag=11)]
        while not got.Test():  # in MPI all along: the flows move on
            MPI.Request.Testall(sends)
            if len(sends) == 1 and MPI.Wtime() - t0 >= at:
                sends.append(comm.Isend(msg, dest=to[1], tag=12))
        flow_s = MPI.Wtime() - t0
        if len(sends) == 1:  # the base (or a flow that ended before its point)
            if not part_way:
                comm.Barrier()
            sends.append(comm.Isend(msg, dest=to[1], tag=12))
        comm.Recv(msg_in, source=frm[1], tag=12)
        took = MPI.Wtime() - t0
        MPI.Request.Waitall(sends)
        return flow_s, took

    flow_s = comm.allreduce(one(math.inf)[0], op=MPI.MAX)  # the flow's time, and a warm-up
    at = (lambda: rng.uniform(0.05, 0.95) * flow_s) if part_way else (lambda: math.inf)
    every = np.array([one(at())[1] for _ in range(n)])
    return np.array(comm.allgather(every))


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    g = args.ranks_per_node
    if comm.size % g or comm.size // g < 2 or comm.size - g < 2:
        return owncluster.refuse(comm, "burst_loss", f"{comm.size} ranks is not 2 or more "
                                 f"nodes of {g} with two ranks on other nodes")  # fmt: skip
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
    parser.add_argument("--spreadout", default="1M,8M",
                        help="then a uniform spread-out of these sizes a rank and its timeouts "
                        "a call by the nodes' counters (1M,8M; 'none': not)")  # fmt: skip
    parser.add_argument("--calls", type=int, default=10, help="the spread-out's timed calls (10)")
    args = parser.parse_args(argv)
    for name in ("sizes", "spreadout"):
        text = getattr(args, name)
        if name == "spreadout" and text == "none":
            args.spreadout = []
            continue
        try:
            setattr(args, name, [parse_size(s) for s in text.split(",")])
        except (ValueError, UsageError) as exc:
            parser.error(f"--{name} {text!r}: {exc}")
    if args.rounds < 2 or args.message < 0 or args.ranks_per_node < 1 or args.calls < 1:
        parser.error("--rounds must be at least 2; --ranks-per-node and --calls at least 1")
    if min(args.sizes + args.spreadout) < 1:
        parser.error("every size of --sizes and --spreadout must be at least 1 byte")
    then = spreadout_timeouts(args.spreadout, args.calls) if args.spreadout else None
    return owncluster.start(
        parser, args, worker,
        lambda: owncluster.cluster_spec(PREFIX, 2, args.ranks_per_node, args.nic, "target-shallow"),
        ("sizes", "message", "rounds", "ranks_per_node", "seed"), then,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
