"""``commbench calibrate``: a system profile measured by microbenchmarks.

Started under the launcher like ``commbench run`` (``mpiexec``/``srun``, or ``commbench
cluster exec`` on the emulated cluster). Every rank takes part; rank 0 fits the
constants and writes two files:

* ``PROFILE.toml``: a system profile in the shipped format (a base profile's launcher,
  devices and environment, with this run's ``[fabric]``), every constant's source
  ``measured: <run id> ...``;
* ``PROFILE.points.jsonl``: the raw points (one JSON object per line, pandas reads it
  with ``pd.read_json(path, lines=True)``), each with the run id.

Nothing is taken from the collectives the profile is used to predict. The points:

``pingpong``, ``pingpong-all``
    8 B one-way latency between two ranks of one node and of two nodes, one pair alone
    and every rank in a pair at once.
``stream``
    one rank streams ``--bytes`` to one peer (in one message, an 8 B ack back): the rate
    of one scale-up link and of one NIC.
``allnics``
    every rank streams ``--bytes`` at once to the rank of the same local index on the
    next node (a rail shift: every NIC sends and receives once, no incast): the rate
    all NICs reach together; ``fabric_GBps`` is the switch-crossing bytes over that time.
``nics``
    as ``allnics`` at ``--bytes`` with only k ranks (k = 2, 4, ... below the rank count),
    each sending to the next of a cycle across nodes and receiving from the one before
    (:func:`nic_cycle`), the rest idle: how late the slowest of k NICs at once ends
    beside the median one.
``flows``
    every rank streams ``--bytes`` at once, split evenly over k ranks of other nodes
    (k = 2, 4, ... up to every remote rank, and the other nodes' count, a rail
    all-to-all's fan; each rank also receives k flows: the k
    destinations are k node-and-index shifts, no incast beyond k): the rate all NICs
    reach with k concurrent flows each (``allnics`` is k = 1), ``fabric_flows_GBps``.
    Both again with each of ``--fabric-bytes`` (4 MiB) per rank: one curve per size, as
    the rate of k flows changes with their bytes (on the emulated cluster six flows of 1
    MiB in all ran ~10 % slower per byte than of 4 MiB, so a 4 MiB fan-out read from the
    1 MiB curve alone was modelled 1.15-1.18x too slow). Not smaller by default: at 256
    KiB a rank the slowest of 8 NICs on the emulated 4x2 ended 1.12x per doubling behind
    the median (barrier exit skew, a few ms, against 22 ms of data), which FAST's stages
    of that size do not pay (modelled with it 1.16-1.26x slow).
``exchange``
    every rank exchanges ``--bytes`` with the rank of its index on node ``n ^ 1`` at once
    (both directions of one pair at the same time, as recursive doubling's and
    Rabenseifner's steps and a FAST stage whose permutation swaps two servers do): the
    rate one direction of such an exchange reaches, ``exchange_GBps`` (kept where below
    what each rank's one-way stream reached in ``allnics``). Over Open MPI's TCP
    transport with its emulated RDMA put (its default) this ran at ~50-60 % of a one-way
    stream's rate on the emulated cluster; without it (the cluster's rank wrapper's
    flags) at a stream's rate, and the constant is then left out.
``burst``
    one message of 8 B, of a 16th and of a quarter of ``--bytes`` from rank 0 to node 1
    (an 8 B ack back), each sent after 0.1 s of idle to a rank already waiting: a NIC
    whose first bytes after an idle spell pass at once (a token bucket, as tc's ``tbf``
    shapes the emulated cluster's NICs) moves the two larger ones in their bytes' time
    at the ``stream`` rate less the same number of free bytes, above the 8 B round trip:
    ``scaleout_burst_bytes`` (kept only where the two sizes agree on a depth that
    matters, at least a tenth of the smaller message, and the smaller did pay the rate
    for some bytes).
``eager``
    rank 0 sends one message of 1 KiB, 2 KiB, ... 256 KiB to a rank of its node and to
    node 1 whose receive is posted 40 ms late: a send within the MPI library's eager
    limit returns at once, a larger one waits for the receiver. The largest size up to
    which every send returned in under 20 ms is ``scaleup_eager_bytes`` /
    ``scaleout_eager_bytes`` (a ring's small steps then wait only for their left
    neighbour).
``release``
    rank 0 sends one message of 4 MiB to node 1, from a barrier: over TCP its ``Send``
    returns once the rest fits in the kernel's buffers, and the time from its return to
    the message's arrival (less one latency) at the ``stream`` rate is
    ``scaleout_send_buffer_bytes``, what is still on its way when a sender moves on
    (kept where it is at least 1 % of the message: over RDMA a send returns on arrival).
``overlap``
    rank 0 sends 512 KiB to a rank of node 1 and, as soon as that ``Send`` returns,
    another 512 KiB to another rank there (or of node 2), against the first alone
    (``overlap-alone``, ``overlap-release``: its arrival, and the second's start): what
    the first still had queued on the NIC ahead of the second, ``scaleout_queue_bytes``
    (those bytes leave first, then the two split the NIC evenly: from its bytes left at
    the release, at the rate it had alone, and the time it then took; 0 where it took
    an even split's time or more). The model reads it as the window a flow has open
    once its first fragment is through (:mod:`commbench.kernels.model.flows`).
``incast``
    k ranks on other nodes send ``--incast-bytes`` each to rank 0 at once (k = 1, 2, 4,
    ...): the time over k single streams' gives the incast coefficient.
``hot`` (a lossy fabric only)
    a fan-out of :data:`HOT_MESSAGE_BYTES` a message, each round's hot rank (round i's
    rank i mod P) taking from k ranks of other nodes that much and a k-th of each of
    ``--hot-bytes`` more (k = 2, 4, ... up to every remote rank): once their other
    messages are through the k converge on its NIC, warm, and overfill it for those
    bytes (:func:`~commbench.kernels.model.fabric.overfilled_ports`). The hot rank's late
    rounds beside the others' give the chance that a NIC k senders overfill for those
    bytes pays a timeout, ``loss_overfill`` (:func:`fit_overfill`): on the emulated
    shallow queue ~0.2-0.55 at 190 KiB (16 ms), ~0.97 at 780 KiB with six senders, where
    a cold incast of the same bytes (each round's first flows) loses a fifth as often.
``stage``
    rounds of an empty exchange (0 bytes) with a rail partner, all ranks at once, the
    partner shifting every round as FAST's stages do: one stage's fixed cost.
``post``
    rank 0 posts n 8 B sends to a rank on another node (n = 1, 16, 64) and waits: the
    slope is the host cost per posted message. Both ``stage`` and ``post`` post as the
    implementations do: persistent requests bound once and started together
    (``Startall``/``Waitall``), not one ``Isend``, ``Irecv`` and ``Wait`` per message,
    whose Python the implementations' bound plans do not pay.
``chain``
    calls of k empty two-sided exchanges with the inter-node butterfly's partners (the
    rank of this one's index on node ``n ^ 2^j``, j cycling), every rank at once, each
    call after MPI's barrier as in the harness's timed loop, k = log2 of the nodes and
    twice that (recursive doubling's and Rabenseifner's step counts): the slowest rank's
    call (median of ``--stage-rounds`` calls). Its slope over k is what one butterfly
    step costs, its intercept what the call pays once (how late the ranks come to it and
    the slowest rank's end). The ``stage`` round costs more per step on the emulated 8x1
    (139-152 us against a slope of 86-109): its partners shift, so each round waits on a
    chain of ranks, where a butterfly's pair waits only on itself.
``ring``
    calls of k steps around the ring of all ranks (each a send of a
    :data:`RING_MESSAGE_BYTES` message to rank + 1 and a receive from rank - 1, bound once
    and started together as the ring all-reduce's steps are), every rank at once, each
    call after MPI's barrier, k = P - 1 and 2(P - 1) (the ring's two halves and the
    whole): the slowest rank's call, as ``chain``'s. Its slope is what a ring step costs
    above its bytes: a message within the eager limit leaves as its step starts, so a
    step waits on the left neighbour's post and one latency, not on an empty exchange
    round (on the emulated 4x2 and 8x1 the ring at 256 B and 4 KiB ran 44-70 us a step
    where a round and a latency make 79-95). Its steps carry a message because an empty
    one is cheaper where the ring's hop stays inside a node: Open MPI's shared-memory
    transport, one way at a time, charges a message ~10 us more than an empty step on the
    emulated 4x2 (``python -m commbench.benchmarks.step_content``; between nodes, and in
    an exchange, the two cost the same).
``put``
    one step of NVRAR's inter-node recursive doubling on one LL8 cell (8 B): every rank
    packs the cell with the call's flag, puts it into the MPI RMA window (passive target,
    ``Rput``, no flush) of the rank of its index on node ``n ^ 2^k``, polls its own
    window memory until that partner's cell shows, unpacks and reduces it, both of a pair
    at once, for k = 0, 1, ... in turn; the time per step. This is how NVRAR's cpu
    backend (:mod:`commbench.kernels.nvrar.cpu`) moves its cells and waits for them, with
    its per-step host work (on 8 single-rank nodes sharing 2 cores ~100 us of a ~500 us
    step); ``put_us`` is what a step costs above a two-sided message. (A put-and-answer
    ping-pong's one-way time is about half of this on the emulated cluster.)
``put-exchange``
    every rank paired with the rank of its index on another node puts ``--bytes`` of
    8-byte cells into its partner's RMA window, both of a pair at once, in the chunks
    NVRAR's cpu backend uses, and polls until it sees all of its partner's: the rate of
    one direction of NVRAR's inter-node step, ``put_exchange_GBps`` (wire bytes).
``reduce``
    one rank reduces ``--bytes`` of the all-reduce's element type into a buffer
    (:func:`commbench.kernels.reduce.reduce_into`): the reduction rate.

Each point is the median of ``--reps`` rounds of the slowest rank's time; ``allnics``,
``nics`` and ``flows`` also keep the median rank's (``median_rank_us``: the ranks that take
part), whose ratio to the slowest is the tail of many NICs sending at once (on the
emulated 8x1 at 1 MiB, all 8 NICs: the median rank 89-91 ms, one stream alone 87, the
slowest 98-108). The whole list runs ``--passes`` times (3), seconds apart: a point's
time is the median of its passes (each pass's is kept in the raw points, ``passes_us``
and ``passes_median_rank_us``), so one pass disturbed by the machine's load does not set
a constant.

Fitting and writing are pure functions (:func:`fit`, :func:`profile_data`,
:func:`dump_toml`), tested without MPI.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

from commbench.errors import UsageError

#: messages posted per burst in the ``post`` points
POST_COUNTS = (1, 16, 64)
#: what each step of the ``ring`` point sends: the ring all-reduce's message on 8 ranks
#: at 256 B, within every eager limit (an empty step costs less: :func:`_ring_calls`)
RING_MESSAGE_BYTES = 32
#: idle before each ``burst`` round: refills a shaped NIC's token bucket (at 100 Mbit/s
#: one of 1 MB refills in 80 ms)
BURST_IDLE_S = 0.1


#: message sizes of the ``eager`` points, and how late their receiver posts (seconds)
EAGER_SIZES = tuple(1 << k for k in range(10, 19))  # 1 KiB .. 256 KiB
EAGER_LATE_S = 0.04


def burst_sizes(nbytes: int) -> tuple[int, int, int]:
    """The ``burst`` points' message sizes: 8 B (the base), a 16th and a quarter of the
    stream's."""
    return 8, max(nbytes // 16, 16), max(nbytes // 4, 32)


#: the constants of a step's fixed cost, which ``--update`` measures again (on the
#: emulated cluster they moved by up to 1.4x within minutes while the rates held)
STEP_KEYS = ("scaleup_latency_us", "scaleout_latency_us", "scaleout_latency_quiet_us", "msg_us",
             "stage_cost_us", "put_us", "butterfly_step_us", "butterfly_call_us", "ring_step_us",
             "ring_call_us")  # fmt: skip
#: the point kinds they are fitted from (:func:`fit`)
STEP_KINDS = ("pingpong", "pingpong-all", "stage", "post", "put", "chain", "ring")

#: what every raw point carries
POINT_KEYS = ("run", "kind", "tier", "peers", "bytes", "reps", "time_us", "GBps", "passes_us")


# ---------------------------------------------------------------- measuring (per rank)


def _now() -> float:
    from mpi4py import MPI

    return MPI.Wtime()


def _quiet_barrier(comm, poll_s: float = 2e-4) -> None:
    """A barrier whose waiting ranks sleep instead of spinning: on an oversubscribed
    machine (the emulated cluster), idle ranks must not take the measured ranks' cores."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll_s)


def median_round(comm, body, reps: int) -> float:
    """Median over ``reps`` rounds of the slowest rank's time for ``body()`` (seconds);
    every round starts from a barrier, and ranks done with a round sleep until the next."""
    return round_spread(comm, body, reps)[0]


def round_spread(
    comm, body, reps: int, ranks: list[int] | None = None, barrier: Any = None
) -> tuple[float, float]:
    """``(slowest, median rank)``: the median over ``reps`` rounds of the slowest rank's
    time for ``body()`` and of the median rank's among ``ranks`` (default: all; the
    ones that take part), rounds as :func:`median_round` (``barrier``: what each round
    starts after, default :func:`_quiet_barrier`). Their ratio is the tail of ranks
    doing the same at once: what the slowest of them loses beside the others."""
    every = rank_rounds(comm, body, reps, barrier)
    part = every if ranks is None else every[ranks]
    return float(np.median(every.max(axis=0))), float(np.median(np.median(part, axis=0)))


def rank_rounds(comm, body, reps: int, barrier: Any = None) -> np.ndarray:
    """Every rank's seconds for ``body()`` in each of ``reps`` rounds (ranks x rounds, on
    every rank); rounds as :func:`round_spread`'s."""
    wait = barrier or (lambda: _quiet_barrier(comm))
    times = []
    for _ in range(reps):
        wait()
        t0 = _now()
        body()
        times.append(_now() - t0)
    return np.array(comm.allgather(times))


def _pingpong(comm, pairs: list[tuple[int, int]], nbytes: int, reps: int, trips: int = 1) -> float:
    """Round-trip seconds of ``nbytes`` from ``a`` to ``b`` and 8 B back, for every pair
    ``(a, b)`` at once (median over ``reps`` rounds of ``trips`` round trips each, the
    slowest pair). Collective: every rank calls it."""
    buf = np.zeros(max(nbytes, 1), dtype=np.uint8)
    ack = np.zeros(8, dtype=np.uint8)
    rank = comm.rank
    role = {a: (b, True) for a, b in pairs} | {b: (a, False) for a, b in pairs}
    peer, first = role.get(rank, (None, False))

    def body() -> None:
        if peer is None:
            return
        for _ in range(trips):
            if first:
                comm.Send(buf[:nbytes], dest=peer, tag=1)
                comm.Recv(ack, source=peer, tag=2)
            else:
                comm.Recv(buf[:nbytes], source=peer, tag=1)
                comm.Send(ack, dest=peer, tag=2)

    body()  # warm-up: connections
    return median_round(comm, body, reps) / trips


def _burst(comm, a: int, b: int, nbytes: int, reps: int, idle_s: float) -> float:
    """Round-trip seconds of ``nbytes`` from ``a`` to ``b`` and 8 B back, ``a`` sending
    after ``idle_s`` of sleep while ``b`` already waits in its receive (so only the
    link has been idle, not the receiver); median over ``reps``, timed on ``a``.
    Collective."""
    buf = np.zeros(max(nbytes, 1), dtype=np.uint8)
    ack = np.zeros(8, dtype=np.uint8)
    times = []
    for _ in range(reps + 1):  # the first: warm-up
        _quiet_barrier(comm)
        if comm.rank == a:
            time.sleep(idle_s)
            t0 = _now()
            comm.Send(buf[:nbytes], dest=b, tag=3)
            comm.Recv(ack, source=b, tag=4)
            times.append(_now() - t0)
        elif comm.rank == b:
            comm.Recv(buf[:nbytes], source=a, tag=3)
            comm.Send(ack, dest=a, tag=4)
    return comm.bcast(float(np.median(times[1:])) if comm.rank == a else 0.0, root=a)


def _late_receiver(comm, a: int, b: int, nbytes: int, reps: int, late_s: float) -> float:
    """Seconds ``a``'s blocking ``Send`` of ``nbytes`` to ``b`` takes while ``b`` sleeps
    ``late_s`` before posting its receive: about ``late_s`` or more where the library waits
    for the receiver (rendezvous), far less within its eager limit. Median over ``reps``
    (after one warm-up), timed on ``a``. Collective."""
    buf = np.zeros(max(nbytes, 1), dtype=np.uint8)
    times = []
    for _ in range(reps + 1):
        _quiet_barrier(comm)
        if comm.rank == a:
            t0 = _now()
            comm.Send(buf[:nbytes], dest=b, tag=9)
            times.append(_now() - t0)
        elif comm.rank == b:
            time.sleep(late_s)
            comm.Recv(buf[:nbytes], source=a, tag=9)
    return comm.bcast(float(np.median(times[1:])) if comm.rank == a else 0.0, root=a)


#: the ``release`` point's message (above what a host's buffers hold, so that its send
#: returns before it arrives) and the ``overlap`` points' (a spread-out step's on 8
#: ranks at 4 MiB a rank)
RELEASE_BYTES = 4 << 20
OVERLAP_BYTES = 512 << 10


def in_flight(nbytes: float, release_ms: float, arrival_ms: float) -> float:
    """Bytes of an ``nbytes`` message not yet arrived when its send returned, assuming
    it arrives at one rate from the start."""
    if arrival_ms <= 0:
        raise ValueError(f"arrival at {arrival_ms} ms: it must be after the start")
    return nbytes * max(arrival_ms - release_ms, 0.0) / arrival_ms


def queued_ahead(nbytes: float, alone_ms: float, release_ms: float, arrival_ms: float) -> float:
    """Bytes the first message still had queued on its NIC ahead of a second started at
    ``release_ms``, if those leave first and the two then split the NIC evenly: its
    bytes left then, L (at the rate r it had alone), took L / r + (L - Q) / r more, so
    Q = 2 L - r x (arrival - release); within 0..L."""
    rate = nbytes / alone_ms
    left = max(nbytes - rate * release_ms, 0.0)
    took = arrival_ms - release_ms
    if took <= 0:
        raise ValueError(f"arrival {arrival_ms} ms is not after the release {release_ms} ms")
    return min(max(2 * left - rate * took, 0.0), left)


def send_train(comm, nbytes: int, dests: list[int]) -> tuple | None:
    """One call, from a barrier: rank 0 sends ``nbytes`` to each of ``dests`` in turn,
    each ``Send`` as soon as the last returned. On rank 0 ``(returns, arrivals)``, lists
    in ms from the barrier (each rank timing from its own barrier exit); None elsewhere.
    Collective."""
    buf = np.ones(nbytes, np.uint8)
    comm.Barrier()
    t0 = _now()
    arrived = 0.0
    returns = []
    if comm.rank == 0:
        for i, d in enumerate(dests):
            comm.Send(buf, dest=d, tag=11 + i)
            returns.append((_now() - t0) * 1e3)
    elif comm.rank in dests:
        comm.Recv(buf, source=0, tag=11 + dests.index(comm.rank))
        arrived = _now() - t0
    times = comm.gather(arrived, root=0)
    if comm.rank != 0:
        return None
    return returns, [times[d] * 1e3 for d in dests]


def send_release(comm, nbytes: int, first: int, second: int | None) -> tuple | None:
    """:func:`send_train` to ``first`` and, when ``second`` is a rank, then to it: on rank
    0 ``(first's return, first's arrival, second's arrival)`` in ms (second 0 without
    one); None elsewhere. Collective."""
    row = send_train(comm, nbytes, [first] if second is None else [first, second])
    if row is None:
        return None
    returns, arrivals = row
    return returns[0], arrivals[0], (arrivals[1] if second is not None else 0.0)


def _release_calls(comm, nbytes: int, first: int, second: int | None, reps: int) -> tuple:
    """Median ``(release, first's arrival)`` ms over ``reps`` :func:`send_release` calls
    (after one to warm the connections), on every rank. Collective."""
    send_release(comm, nbytes, first, second)
    rows = [send_release(comm, nbytes, first, second) for _ in range(reps)]
    mid = np.median(np.array(rows), axis=0)[:2] if comm.rank == 0 else None
    return tuple(float(v) for v in comm.bcast(mid, root=0))


def _exchange(comm, pairs: dict[int, tuple[int, int]], nbytes: int, reps: int) -> tuple:
    """Every rank sends ``nbytes`` to ``pairs[rank][0]`` and receives from
    ``pairs[rank][1]`` at once (ranks not in ``pairs`` idle); the slowest and the median
    rank's seconds (:func:`round_spread`)."""
    send = np.zeros(max(nbytes, 1), dtype=np.uint8)
    recv = np.zeros_like(send)
    peers = pairs.get(comm.rank)

    def body() -> None:
        if peers is None:
            return
        to, frm = peers
        reqs = []
        if frm is not None:
            reqs.append(comm.Irecv(recv[:nbytes], source=frm, tag=3))
        if to is not None:
            reqs.append(comm.Isend(send[:nbytes], dest=to, tag=3))
        for r in reqs:
            r.Wait()

    body()
    return round_spread(comm, body, reps, sorted(pairs))


def flow_peers(rank: int, nodes: int, g: int, k: int) -> list[int]:
    """The k remote ranks ``rank`` streams to in a ``flows`` point: shift j (j < k) goes
    1 + j mod (N - 1) nodes on and j div (N - 1) local indices round, so every shift is a
    permutation of the ranks and every rank receives exactly k flows."""
    node, local = divmod(rank, g)
    out = []
    for j in range(k):
        hop, turn = 1 + j % (nodes - 1), j // (nodes - 1)
        out.append(((node + hop) % nodes) * g + (local + turn) % g)
    return out


def _flows(comm, g: int, k: int, nbytes: int, reps: int) -> tuple:
    """Every rank sends ``nbytes`` split over its k :func:`flow_peers` and receives
    from the k ranks that send to it, all at once; the slowest and the median rank's
    seconds (:func:`round_spread`) and every rank's in each round (on a lossy fabric
    the rounds a retransmission timeout made late, :func:`fit_loss`)."""
    p, rank = comm.size, comm.rank
    nodes = p // g
    part = max(nbytes // k, 1)
    send = np.zeros(part, dtype=np.uint8)
    recv = np.zeros((k, part), dtype=np.uint8)
    to = flow_peers(rank, nodes, g, k)
    frm = [r for r in range(p) if rank in flow_peers(r, nodes, g, k)]

    def body() -> None:
        reqs = [comm.Irecv(recv[i], source=s, tag=8) for i, s in enumerate(frm)]
        reqs += [comm.Isend(send, dest=d, tag=8) for d in to]
        for r in reqs:
            r.Wait()

    body()
    every = rank_rounds(comm, body, reps)
    return float(np.median(every.max(axis=0))), float(np.median(np.median(every, axis=0))), every


def _incast(comm, senders: list[int], nbytes: int, reps: int) -> float:
    """``senders`` each send ``nbytes`` to rank 0 at once; slowest rank's seconds."""
    rank = comm.rank
    send = np.zeros(max(nbytes, 1), dtype=np.uint8)
    recv = np.zeros((len(senders), max(nbytes, 1)), dtype=np.uint8)

    def body() -> None:
        if rank == 0:
            reqs = [comm.Irecv(recv[i, :nbytes], source=s, tag=4) for i, s in enumerate(senders)]
            for r in reqs:
                r.Wait()
        elif rank in senders:
            comm.Send(send[:nbytes], dest=0, tag=4)

    body()
    return median_round(comm, body, reps)


#: the message of the ``hot`` points' fan-out: a 1 MiB fan-out's on 8 ranks, whose own
#: loss (a rank late in ~0.1-0.3 of rounds on the emulated shallow queue) leaves the hot
#: rank's readable beside it
HOT_MESSAGE_BYTES = 128 * 1024


def heavy_senders(target: int, p: int, g: int, k: int) -> list[int]:
    """The k ranks that send a ``hot`` round's larger message to ``target``: the first k
    of the other nodes' ranks, from the target's next node on."""
    nodes, node = p // g, target // g
    order = [((node + j) % nodes) * g + i for j in range(1, nodes) for i in range(g)]
    return order[:k]


def hot_counts(remote: int) -> list[int]:
    """The sender counts of the ``hot`` points: 2, 4, 8, ... below ``remote`` (the
    other nodes' ranks a rank has), then ``remote``; none below 2."""
    out, k = [], 2
    while k < remote:
        out.append(k)
        k *= 2
    return out + [remote] if remote >= 2 else []


def hot_marks(shape: tuple[int, int]) -> np.ndarray:
    """Which samples of a ranks x rounds array of ``hot`` (or barrier_loss ``incast``)
    rounds are the round's hot rank's: round i's rank i mod P."""
    ranks, rounds = shape
    marks = np.zeros(shape, dtype=bool)
    marks[np.arange(rounds) % ranks, np.arange(rounds)] = True
    return marks


def hot_body(comm, g: int, k: int, part: int, big: int) -> tuple:
    """``(body, restart)``: one round of a fan-out of ``part`` bytes a message whose
    round-i hot rank (i mod P) takes ``big`` from each of its k :func:`heavy_senders`
    (collective), and what starts the turns again at rank 0."""
    p, rank = comm.size, comm.rank
    send, recv = np.ones(big, np.uint8), np.empty((p, big), np.uint8)
    turn = [0]

    def body() -> None:
        target = turn[0] % p
        turn[0] += 1
        heavy = heavy_senders(target, p, g, k)
        reqs = [comm.Irecv(recv[s, : big if rank == target and s in heavy else part],
                           source=s, tag=9) for s in range(p) if s != rank]  # fmt: skip
        reqs += [comm.Isend(send[: big if d == target and rank in heavy else part],
                            dest=d, tag=9) for d in range(p) if d != rank]  # fmt: skip
        for r in reqs:
            r.Wait()

    def restart() -> None:
        turn[0] = 0

    return body, restart


def _hot(comm, g: int, k: int, extra: int, rounds: int) -> tuple:
    """Every rank's seconds in each of ``rounds`` rounds (ranks x rounds, ``rounds`` a
    multiple of the ranks) of :func:`hot_body` with :data:`HOT_MESSAGE_BYTES` a message
    and ``extra // k`` more from each heavy sender; with the slowest and the median
    rank's, as :func:`_flows`'s."""
    body, restart = hot_body(comm, g, k, HOT_MESSAGE_BYTES,
                             HOT_MESSAGE_BYTES + max(extra // k, 1))  # fmt: skip
    body()
    restart()
    every = rank_rounds(comm, body, rounds)
    return float(np.median(every.max(axis=0))), float(np.median(np.median(every, axis=0))), every


def _persistent(comm, sends: list, recvs: list, tag: int) -> list:
    """Persistent requests for ``(peer, buffer)`` sends and receives (sends first),
    started together with ``Startall`` as the implementations' bound plans post
    (``kernels.transport.bind_posts``): a point measured with ``Isend``/``Irecv`` and one
    ``Wait`` each paid ~40-60 us more per empty round on the oversubscribed emulated
    8x1 (260-300 against 210-250 us), which no implementation pays."""
    reqs = [comm.Send_init(buf, dest=peer, tag=tag) for peer, buf in sends]
    return reqs + [comm.Recv_init(buf, source=peer, tag=tag) for peer, buf in recvs]


def _start_wait(reqs: list) -> None:
    from mpi4py import MPI

    MPI.Prequest.Startall(reqs)
    MPI.Request.Waitall(reqs)


def _free(plans: list[list]) -> None:
    for reqs in plans:
        for req in reqs:
            req.Free()


def _stage_rounds(comm, g: int, rounds: int, reps: int) -> float:
    """Seconds per round of ``rounds`` empty rail exchanges (shift 1, 2, ... nodes), each
    round's posts bound once and started together."""
    p, rank = comm.size, comm.rank
    nodes = p // g
    node, local = divmod(rank, g)
    empty = np.zeros(1, dtype=np.uint8)[:0]
    plans = []
    for k in range(rounds):
        shift = 1 + k % (nodes - 1)
        to = ((node + shift) % nodes) * g + local
        frm = ((node - shift) % nodes) * g + local
        plans.append(_persistent(comm, [(to, empty)], [(frm, empty)], tag=5))

    def body() -> None:
        for reqs in plans:
            _start_wait(reqs)

    body()
    secs = median_round(comm, body, reps) / rounds
    _free(plans)
    return secs


def _chain_calls(comm, g: int, steps: int, calls: int) -> float:
    """Seconds of a call of ``steps`` empty exchanges with the inter-node butterfly's
    partners (:func:`butterfly_partners`, cycled), each step's posts bound once and
    started together as recursive doubling's and Rabenseifner's are (:func:`_calls`).
    Collective."""
    partners = butterfly_partners(comm.rank, comm.size // g, g)
    empty = np.zeros(1, dtype=np.uint8)[:0]
    plans = [
        _persistent(comm, [(peer, empty)], [(peer, empty)], tag=10)
        for peer in (partners[k % len(partners)] for k in range(steps if partners else 0))
    ]
    return _calls(comm, plans, calls)


def _ring_calls(comm, steps: int, calls: int) -> float:
    """Seconds of a call of ``steps`` steps around the ring (each a
    :data:`RING_MESSAGE_BYTES` send to rank + 1 and a receive from rank - 1, bound once
    and started together, :func:`_calls`). Collective."""
    p, r = comm.size, comm.rank
    send = np.ones((steps, RING_MESSAGE_BYTES), np.uint8)
    recv = np.empty((steps, RING_MESSAGE_BYTES), np.uint8)
    plans = [_persistent(comm, [((r + 1) % p, send[k])], [((r - 1) % p, recv[k])], tag=12)
             for k in range(steps)]  # fmt: skip
    return _calls(comm, plans, calls)


def _calls(comm, plans: list, calls: int) -> float:
    """The median over ``calls`` calls of the slowest rank's seconds for a call that
    starts and waits ``plans`` (persistent requests) one after the other; each call
    starts after ``comm.Barrier()``, the barrier the harness's timed loop waits in (not
    :func:`_quiet_barrier`: how late the ranks leave it is part of what is measured).
    The plans are freed. Collective."""

    def body() -> None:
        for reqs in plans:
            _start_wait(reqs)

    body()  # the connections, warm
    secs = round_spread(comm, body, calls, barrier=comm.Barrier)[0]
    _free(plans)
    return secs


def _posts(comm, a: int, b: int, n: int, reps: int) -> float:
    """Seconds for ``a`` to start ``n`` bound 8 B sends to ``b`` (which starts ``n``
    bound receives), wait for them all and get an 8 B ack."""
    rank = comm.rank
    bufs = np.zeros((n, 8), dtype=np.uint8)
    ack = np.zeros(8, dtype=np.uint8)
    reqs = []
    if rank == a:
        reqs = _persistent(comm, [(b, bufs[i]) for i in range(n)], [], tag=6)
    elif rank == b:
        reqs = _persistent(comm, [], [(a, bufs[i]) for i in range(n)], tag=6)

    def body() -> None:
        if rank == a:
            _start_wait(reqs)
            comm.Recv(ack, source=b, tag=7)
        elif rank == b:
            _start_wait(reqs)
            comm.Send(ack, dest=a, tag=7)

    body()
    secs = median_round(comm, body, reps)
    _free([reqs])
    return secs


def butterfly_partners(rank: int, nodes: int, g: int) -> list[int]:
    """The rank of each inter-node step of NVRAR's recursive doubling, for ``rank``:
    same local index on node ``node ^ 2^k`` (k = 0, 1, ...); empty for a node beyond
    the largest power of two (it would only fold in and out)."""
    node, local = divmod(rank, g)
    p2 = 1 << (nodes.bit_length() - 1)
    if node >= p2:
        return []
    return [((node ^ (1 << k)) * g + local) for k in range(p2.bit_length() - 1)]


@contextlib.contextmanager
def _rail_window(comm, g: int, nwords: int):
    """``(win, words)``: an MPI RMA window of ``nwords`` zeroed 64-bit words over this
    rank's rail (:func:`_rail`), passively locked for its life, as NVRAR's cpu backend
    keeps its windows. Collective (over ``comm``) on entry and on a normal exit; an
    exception leaves without the collective clean-up (the other ranks may never reach
    it), so the caller's handler can end the job instead of hanging in a barrier."""
    from mpi4py import MPI

    rail = _rail(comm, g)
    win = MPI.Win.Allocate(8 * nwords, 8, comm=rail)
    words = np.frombuffer(win.tomemory(), dtype=np.uint64)[:nwords]
    words[:] = 0
    comm.Barrier()
    win.Lock_all(MPI.MODE_NOCHECK)
    yield win, words
    comm.Barrier()
    win.Unlock_all()
    win.Free()
    rail.Free()


def _poll(win, arrived, pending: list, deadline: float, what: str) -> None:
    """Wait until ``arrived()`` as NVRAR's cpu backend waits for its cells:
    ``Win.Sync`` then the check; while its own puts are in flight a rank tests them (MPI
    progress pushes them out) and yields, otherwise it yields for
    :data:`~commbench.kernels.nvrar.cpu.YIELD_POLLS` empty polls and then sleeps 20 us
    (the backend's default ``poll_sleep_us``) between polls. ``TimeoutError`` naming
    ``what`` after ``deadline`` (``time.monotonic()``)."""
    from mpi4py import MPI

    from commbench.kernels.nvrar.cpu import YIELD_POLLS

    polls = 0
    while True:
        win.Sync()
        if arrived():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"put microbenchmark: {what} did not arrive in time (one-sided MPI does "
                "not progress on this transport)"
            )
        if pending and MPI.Request.Testall(pending):
            pending.clear()
        polls += 1
        if pending or polls <= YIELD_POLLS:
            os.sched_yield()
        else:
            time.sleep(20e-6)


def put_rounds(comm, g: int, dtype: np.dtype, reps: int, calls: int,
                timeout_s: float = 60.0) -> float:  # fmt: skip
    """Seconds of one step of NVRAR's inter-node recursive doubling on one cell: every
    rank packs one LL8 cell of ``dtype`` elements with the call's flag, puts it into its
    step partner's window (:func:`butterfly_partners`), polls its own until the
    partner's shows (:class:`~commbench.kernels.nvrar.cpu.Arrival`), unpacks it and
    reduces it into its own, both of a pair at once, step after step (median over
    ``reps`` rounds of ``calls`` calls, the slowest rank, per step). ``Rput`` into a
    :func:`_rail_window`, waiting by :func:`_poll`; a call's puts completed at its end.
    Cells alternate between two regions by call parity, as NVRAR's do: a partner done
    with call t may put its call t + 1 cell before this rank has read call t's.
    The host work of a step (pack, arrival check, unpack, reduce) is in the time: on an
    oversubscribed node it is a large part of a small step. Collective."""
    from mpi4py import MPI

    from commbench.kernels.nvrar import cells
    from commbench.kernels.nvrar.cpu import PARITIES, Arrival
    from commbench.kernels.reduce import reduce_into, storage

    partners = [peer // g for peer in butterfly_partners(comm.rank, comm.size // g, g)]
    nsteps = max(len(butterfly_partners(0, comm.size // g, g)), 1)
    epc = cells.elems_per_cell(dtype.itemsize)
    mine = storage(np.ones(epc, dtype=dtype), dtype)
    out = mine.copy()
    src = np.zeros(nsteps, dtype=np.uint64)
    pending: list = []
    seq = [0]
    with _rail_window(comm, g, PARITIES * nsteps) as (win, words):

        def body() -> None:
            for _ in range(calls):
                seq[0] += 1
                flag = cells.seq_flag(seq[0])
                for k, peer in enumerate(partners):
                    at = seq[0] % PARITIES * nsteps + k
                    cells.pack(np, mine, flag, src[k : k + 1])
                    pending.append(win.Rput([src[k : k + 1], MPI.UINT64_T], peer,
                                            target=(at, 1, MPI.UINT64_T)))  # fmt: skip
                    arrival = Arrival(words, at, at + 1, flag)
                    _poll(win, arrival, pending, time.monotonic() + timeout_s,
                          f"rank {comm.rank}'s cell from node {peer}")  # fmt: skip
                    data = cells.unpack(np, arrival.cells, epc, dtype.itemsize)
                    reduce_into(np, out, mine, data, "sum", dtype)
                if pending:
                    MPI.Request.Waitall(pending)
                    pending.clear()

        body()  # warm-up: connections
        return median_round(comm, body, reps) / (calls * nsteps)


def _put_exchange(comm, g: int, pairs: list[tuple[int, int]], nbytes: int, reps: int,
                  timeout_s: float = 60.0) -> float:  # fmt: skip
    """Seconds for every pair to put ``nbytes`` of 8-byte cells into each other's window
    at once and see all of the partner's, the slowest pair (median over ``reps`` rounds).
    As NVRAR's cpu backend moves a step's cells: ``Rput`` per chunk (its cpu tuning
    table's chunk for that payload) into a :func:`_rail_window`, the receiver waiting
    (:func:`_poll`) for the last cell of each chunk to carry the round's flag.
    Collective."""
    from mpi4py import MPI

    from commbench.kernels.nvrar.tuning import chunk_bounds, load_table

    ncells = max(1, nbytes // 8)
    chunks = chunk_bounds(ncells, load_table("cpu").lookup(4 * ncells).chunk_cells())
    src = np.zeros(ncells, dtype=np.uint64)
    peer = {a: b for a, b in pairs} | {b: a for a, b in pairs}
    peer = peer.get(comm.rank)
    peer = None if peer is None else peer // g  # its rank in the rail
    seq = [0]
    u64 = MPI.UINT64_T
    with _rail_window(comm, g, ncells) as (win, words):

        def body() -> None:
            if peer is None:
                return
            seq[0] += 1
            flag = seq[0]
            src[:] = flag
            pending = [win.Rput([src[a:b], u64], peer, target=(a, b - a, u64))
                       for a, b in chunks]  # fmt: skip
            deadline = time.monotonic() + timeout_s
            for _a, b in chunks:
                _poll(win, lambda b=b: int(words[b - 1]) >= flag, pending, deadline,
                      f"rank {comm.rank}'s cells from node {peer}")  # fmt: skip
            MPI.Request.Waitall(pending)

        body()  # warm-up: connections
        return median_round(comm, body, reps)


def _rail(comm, g: int):
    """The ranks of this rank's local index, one per node, in node order: NVRAR's cpu
    backend opens its windows over this communicator, so no window has a peer of its own
    node (with one, the ``put-exchange`` point on the emulated 4x2 read 4.9-5.4 MB/s each
    way, against 9.4 over the rail, which is what NVRAR's puts reach)."""
    return comm.Split(comm.rank % g, comm.rank)


def _reduce_seconds(nbytes: int, dtype: np.dtype, reps: int) -> float:
    from commbench.kernels.reduce import reduce_into, storage

    count = max(nbytes // dtype.itemsize, 1)
    a = storage(np.ones(count, dtype=np.float32).astype(np.float32), dtype)
    b = a.copy()
    out = np.empty_like(a)
    times = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        reduce_into(np, out, a, b, "sum", dtype)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def fabric_sizes(nbytes: int, fabric_bytes: list[int]) -> list[int]:
    """The bytes per rank of the ``allnics`` and ``flows`` points: ``--bytes`` and each
    of ``--fabric-bytes`` that differs and is not 0, once each."""
    sizes = [nbytes]
    for size in fabric_bytes:
        if size and size not in sizes:
            sizes.append(size)
    return sizes


def nic_cycle(nranks: int, g: int, k: int) -> dict[int, tuple[int, int]] | None:
    """k ranks each sending to the next of a cycle and receiving from the one before, as
    every rank of ``allnics`` does (one flow out and one in: what a rank of a FAST stage
    or of a ring's step has): the ranks taken local index by local index, node after
    node (0, g, 2g, ..., 1, g + 1, ...), so that each hop crosses nodes. ``{rank: (to,
    from)}`` for :func:`_exchange`; None where some hop would not cross nodes."""
    nodes = nranks // g
    order = [n * g + local for local in range(g) for n in range(nodes)][:k]
    cycle = {r: (order[(i + 1) % k], order[i - 1]) for i, r in enumerate(order)}
    if k < 2 or any(r // g == to // g for r, (to, _) in cycle.items()):
        return None
    return cycle


def nic_counts(nics: int) -> list[int]:
    """The sending NICs of the ``nics`` points: 2, 4, ... below ``nics`` (all of them
    is the ``allnics`` point)."""
    return [1 << i for i in range(1, max(nics - 1, 1).bit_length())]


def flow_counts(remote: int, nodes: int) -> list[int]:
    """k of the ``flows`` points: 2, 4, ... below ``remote`` (the remote ranks),
    ``remote`` itself, and ``nodes - 1`` (the rank of its index on every other node: a
    rail all-to-all's step, FAST's and balance-only's between nodes; on 4x2 k = 3, which
    k = 2 and 4 do not hold between them on a lossy fabric: a port's chance of a timeout
    at 1 MiB a rank read 0.074, 0.047 and 0.158 at k = 2, 3 and 4 on the emulated
    shallow queue). k = 1 is the ``allnics`` point."""
    ks, k = [], 2
    while k < remote:
        ks.append(k)
        k *= 2
    ks += [remote] if remote > 1 else []
    return sorted(set(ks) | ({nodes - 1} if 2 <= nodes - 1 <= remote else set()))


def busy_pairs(nranks: int, g: int, tier: str) -> list[tuple[int, int]]:
    """Disjoint pairs that keep as many ranks as possible busy on one tier: local index
    ``l`` with ``l ^ 1`` of the same node (scale-up), node ``n`` with ``n ^ 1`` at the
    same local index (scale-out)."""
    pairs = []
    for r in range(nranks):
        node, local = divmod(r, g)
        other = (node * g + (local ^ 1)) if tier == "scaleup" else ((node ^ 1) * g + local)
        if r < other < nranks and (tier == "scaleout" or (local ^ 1) < g):
            pairs.append((r, other))
    return pairs


def measure(comm, gpus_per_node: int, opts: dict) -> list[dict]:
    """Every microbenchmark on ``comm`` (ranks ordered node by node, ``gpus_per_node``
    per node), ``opts["passes"]`` times over; the points (:func:`combine_passes`), on
    every rank (the same list). Collective. The points that overflow ports (``flows``,
    ``incast``) run after every pass of the others: on a lossy fabric they drop packets,
    and a connection's window stays cut for a while after (on the emulated shallow queue
    the rail exchange of 1 MiB read 89 ms in a calibrate's first pass and 104-106 ms in
    the passes that followed the first's incast)."""
    n = opts["passes"]
    quiet = [_measure_pass(comm, gpus_per_node, opts) for _ in range(n)]
    if opts.get("steps_only", False) or comm.size // gpus_per_node < 2:
        return combine_passes(quiet)
    loud = [_overflow_pass(comm, gpus_per_node, opts) for _ in range(n)]
    return combine_passes([q + o for q, o in zip(quiet, loud, strict=True)])


def combine_passes(passes: list[list[dict]]) -> list[dict]:
    """One point per microbenchmark from several passes over the same list: the median of
    its passes' times (``passes_us`` keeps each). A pass takes tens of seconds, so a load
    spike that slows one point for a few seconds spoils one pass of it, not the point: on
    the emulated cluster one ``flows`` point read at 0.84 of its rate in the calibrations
    before and after had set eight fan-out and ``mpi`` rows of a validation 1.2x off.
    """
    first = passes[0]
    for other in passes[1:]:
        if [_point_id(q) for q in other] != [_point_id(q) for q in first]:
            raise ValueError("calibrate passes measured different points")
    points = []
    for i, q in enumerate(first):
        times = [pts[i]["time_us"] for pts in passes]
        us = statistics.median(times)
        point = {**q, "time_us": us, "GBps": _GBps(q["bytes"], us), "passes_us": times}
        if "median_rank_us" in q:
            medians = [pts[i]["median_rank_us"] for pts in passes]
            point.update(median_rank_us=statistics.median(medians), passes_median_rank_us=medians)
        if "rank_rounds_us" in q:  # each rank's rounds of every pass, one after the other
            point["rank_rounds_us"] = np.hstack(
                [pts[i]["rank_rounds_us"] for pts in passes]
            ).tolist()
        points.append(point)
    return points


def _through_us(point: dict) -> float:
    """A spread point's time for the NICs' throughput: the median rank's where it was
    kept (the slowest's tail is :func:`fit_tail`'s), else the slowest rank's."""
    return point.get("median_rank_us") or point["time_us"]


def fit_tail(points: list[dict], latency_us: float, nics: int) -> list[list[float]]:
    """``[[k, stretch per doubling, bytes per rank], ...]`` (``Fabric.fabric_tail``) from
    ``allnics`` (k = 1) and ``flows`` points with the median rank's time: the slowest
    rank's data time over the median's is the stretch of ``nics`` NICs at once,
    ``stretch ** log2(nics)``; none below 1. Empty where no point kept its median."""
    rows = []
    for q in points:
        if not q.get("median_rank_us"):
            continue
        ratio = max(q["time_us"] - latency_us, 1e-3) / max(q["median_rank_us"] - latency_us, 1e-3)
        k = 1 if q["kind"] == "allnics" else q["peers"]
        rows.append([k, _round(max(ratio, 1.0) ** (1 / math.log2(nics))), q["bytes"]])
    return sorted(rows, key=lambda row: (row[2], row[0])) if nics > 1 else []


def port_loss(late: float, k: int) -> float:
    """The chance ``p`` that a port taking k senders pays a timeout in a round, from the
    share of ranks late in the ``flows`` pattern (each rank sends into k such ports and
    takes k senders in its own): a timeout makes its flow's two ends late, so a rank is
    on time with ``(1 - p) (1 - p / k) ** k``
    (:func:`~commbench.kernels.model.fabric.late_chance`); solved by bisection."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if 1 - (1 - mid) * (1 - mid / k) ** k < late:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


#: a round this late (µs) waited for a connection to be made, not for a lost packet:
#: TCP sends a SYN again after 1 s, where data's first timeout is 200 ms
CONNECT_LATE_US = 1e6


def fit_loss(points: list[dict]) -> tuple[float, list[list[float]]] | None:
    """``(loss_timeout_us, loss_late)`` on a lossy fabric from the ``flows`` points' rank
    rounds, or None where no round stands apart.

    A round's excess is its time over the median rank's in the ``allnics`` point of its
    size (the same bytes each way, one sender a port). The excesses of every ``flows``
    point, pooled, split in two where the variance within the two is least; where the
    upper part stands apart (its mean above the lower's by four of the lower's standard
    deviations) its rounds are the ones a retransmission timeout made late (TCP's
    timeout is 200 ms at least, the rounds ~100 ms), the timeout is the upper part's
    median over the lower's (:func:`split_late`), and each point's share of late rounds
    gives its ports' chance of a timeout (:func:`port_loss`): ``[[k, p, bytes per rank],
    ...]``. A round :data:`CONNECT_LATE_US` or more late is left out of both: it waited
    for a connection's SYN to be sent again (after 1, 3, 7, 15, 31 s), once in a
    connection's life, where a port's data timeouts make a round late by less (one
    emulated calibration read a 31 s round as its timeout, every port's chance 0)."""
    base = {q["bytes"]: _through_us(q) for q in points if q["kind"] == "allnics"}
    flows = [q for q in points
             if q["kind"] == "flows" and q.get("rank_rounds_us") and q["bytes"] in base]  # fmt: skip
    if not flows:
        return None
    excess = [np.asarray(q["rank_rounds_us"], float).ravel() - base[q["bytes"]] for q in flows]
    excess = [e[e < CONNECT_LATE_US] for e in excess]
    split = split_late(np.concatenate(excess))
    if split is None:
        return None
    threshold, timeout = split
    rows = [[q["peers"], _round(port_loss(float((e > threshold).mean()), q["peers"])), q["bytes"]]
            for q, e in zip(flows, excess, strict=True)]  # fmt: skip
    return timeout, sorted(rows, key=lambda row: (row[2], row[0]))


def split_late(times) -> tuple[float, float] | None:
    """``(threshold, late by)`` for times of which some a timeout made late, or None where
    none stands apart: sorted, split in two where the variance within the two is least
    (the lower part two values at least, the upper one); the upper part is late where its mean is above the
    lower's by four of the lower's standard deviations. The threshold lies midway
    between the two parts, ``late by`` is the upper part's median over the lower's."""
    x = np.sort(np.asarray(times, dtype=np.float64).ravel())
    n = x.size
    if n < 3:
        return None
    i = np.arange(2, n)  # the upper part starts at x[i]
    s1, s2 = np.cumsum(x), np.cumsum(x * x)
    left = s2[i - 1] - s1[i - 1] ** 2 / i  # sum of squared deviations of x[:i]
    right = (s2[-1] - s2[i - 1]) - (s1[-1] - s1[i - 1]) ** 2 / (n - i)
    cut = int(i[np.argmin(left + right)])
    lower, upper = x[:cut], x[cut:]
    if upper.mean() - lower.mean() < 4 * max(lower.std(), 1e-9):
        return None
    return (lower[-1] + upper[0]) / 2, float(np.median(upper) - np.median(lower))


def fit_overfill(points: list[dict], timeout_us: float, nic_GBps: float) -> list[list[float]]:
    """``loss_overfill``, ``[[k, chance, bytes], ...]``, from the ``hot`` points' rank
    rounds (round i's hot rank i mod P): a rank's round is late where it took half a
    ``timeout_us`` more than the other ranks' median round (the hot rank: and its extra
    bytes at ``nic_GBps``); with the hot rank late in a share h of its rounds and the
    others in o, a hot NIC's own chance is ``1 - (1 - h) / (1 - o)`` (the hot rank is
    late by its own NIC or as the others are), at least 0. Empty without ``hot`` points.
    A round :data:`CONNECT_LATE_US` or more late is left out, as :func:`fit_loss` does."""
    rows = []
    for q in points:
        if q["kind"] != "hot" or not q.get("rank_rounds_us"):
            continue
        t = np.asarray(q["rank_rounds_us"], dtype=np.float64)
        hot = hot_marks(t.shape)
        base = float(np.median(t[~hot]))
        kept = t - base < CONNECT_LATE_US  # as fit_loss: a connection's SYN is no timeout
        o = float((t[~hot & kept] > base + timeout_us / 2).mean())
        extra = q["bytes"] / (nic_GBps * 1e3)
        h = float((t[hot & kept] > base + extra + timeout_us / 2).mean())
        chance = max(1.0 - (1.0 - h) / (1.0 - o), 0.0) if o < 1 else 0.0
        rows.append([q["peers"], _round(chance), q["bytes"]])
    return sorted(rows, key=lambda row: (row[2], row[0]))


def _GBps(nbytes: int, us: float) -> float | None:
    """A point's rate in GB/s; None where it moved no bytes (or took no time)."""
    return nbytes / us / 1e3 if us > 0 and nbytes else None


def _point_id(point: dict) -> tuple:
    return tuple(point[k] for k in ("kind", "tier", "peers", "bytes"))


def _point(kind: str, tier: str, peers: int, size: int, seconds, n_reps: int) -> dict:
    """A raw point; ``seconds``: the slowest rank's, or ``(slowest, median rank)``, or
    those and every rank's in each round (ranks x rounds)."""
    got = seconds if isinstance(seconds, tuple) else (seconds,)
    us = got[0] * 1e6
    point = dict(kind=kind, tier=tier, peers=peers, bytes=size, reps=n_reps,
                 time_us=us, GBps=_GBps(size, us))  # fmt: skip
    if len(got) > 1:
        point["median_rank_us"] = got[1] * 1e6
    if len(got) > 2:
        point["rank_rounds_us"] = np.round(np.asarray(got[2]) * 1e6, 1).tolist()
    return point


def _overflow_pass(comm, gpus_per_node: int, opts: dict) -> list[dict]:
    """One pass over the points that overflow ports: ``flows`` at each fabric size (k
    senders into every NIC), then ``incast`` (k = 1, 2, 4, ... senders into rank 0), then
    ``hot`` (on a lossy fabric: ``opts["hot_bytes"]`` overfilled by k senders)."""
    p, g = comm.size, gpus_per_node
    reps, ibytes, rounds = opts["reps"], opts["incast_bytes"], opts["flows_rounds"]
    points = [_point("flows", "scaleout", k, size, _flows(comm, g, k, size, rounds), rounds)
              for size in fabric_sizes(opts["bytes"], opts["fabric_bytes"])
              for k in flow_counts(p - g, p // g)]  # fmt: skip
    remote = list(range(g, p))
    k = 1
    while k <= len(remote):
        secs = _incast(comm, remote[:k], ibytes, reps)
        points.append(_point("incast", "scaleout", k, ibytes, secs, reps))
        k = k * 2 if k * 2 <= len(remote) or k == len(remote) else len(remote)
    hot_rounds = -(-rounds // p) * p  # whole turns of the hot rank
    points += [_point("hot", "scaleout", k, extra, _hot(comm, g, k, extra, hot_rounds), hot_rounds)
               for k in hot_counts(p - g) for extra in opts["hot_bytes"]]  # fmt: skip
    return points


def _measure_pass(comm, gpus_per_node: int, opts: dict) -> list[dict]:
    """One pass over every microbenchmark but those that overflow ports
    (:func:`_overflow_pass`; with ``opts["steps_only"]`` only the :data:`STEP_KINDS`):
    each point the median of its ``reps``."""
    p, g = comm.size, gpus_per_node
    steps_only = opts.get("steps_only", False)
    nodes = p // g
    reps, nbytes = opts["reps"], opts["bytes"]
    points: list[dict] = []

    def add(kind: str, tier: str, peers: int, size: int, seconds, n_reps: int) -> None:
        points.append(_point(kind, tier, peers, size, seconds, n_reps))

    tiers = []
    if g > 1:
        tiers.append(("scaleup", 1))
    if nodes > 1:
        tiers.append(("scaleout", g))
    for tier, peer in tiers:
        add("pingpong", tier, 1, 8, _pingpong(comm, [(0, peer)], 8, reps, 20) / 2, reps * 20)
        busy = busy_pairs(p, g, tier)
        secs = _pingpong(comm, busy, 8, reps, 20) / 2
        add("pingpong-all", tier, 2 * len(busy), 8, secs, reps * 20)
        if steps_only:
            continue
        add("stream", tier, 1, nbytes, _pingpong(comm, [(0, peer)], nbytes, reps), reps)
        if tier == "scaleout":
            for size in burst_sizes(nbytes):
                n_reps = 2 * reps + 1  # one message each: a spread of a few 100 us
                secs = _burst(comm, 0, peer, size, n_reps, BURST_IDLE_S)
                add("burst", tier, 1, size, secs, n_reps)
        for size in EAGER_SIZES:
            add("eager", tier, 1, size, _late_receiver(comm, 0, peer, size, 3, EAGER_LATE_S), 3)
    if nodes > 1 and not steps_only:
        rail = {r: (((r // g + 1) % nodes) * g + r % g, ((r // g - 1) % nodes) * g + r % g)
                for r in range(p)}  # fmt: skip
        for size in fabric_sizes(nbytes, opts["fabric_bytes"]):
            add("allnics", "scaleout", p, size, _exchange(comm, rail, size, reps), reps)
            if size == nbytes:
                for k in nic_counts(p):
                    cycle = nic_cycle(p, g, k)
                    if cycle is not None:
                        secs = _exchange(comm, cycle, size, reps)
                        add("nics", "scaleout", k, size, secs, reps)
        pairs = {}
        for a, b in busy_pairs(p, g, "scaleout"):
            pairs[a], pairs[b] = (b, b), (a, a)
        add(
            "exchange",
            "scaleout",
            len(pairs),
            nbytes,
            _exchange(comm, pairs, nbytes, reps)[0],
            reps,
        )
        release, arrival = _release_calls(comm, RELEASE_BYTES, g, None, reps)
        drain = max(arrival - release, 0.0)  # 0: returned on arrival (clocks ~a latency apart)
        add("release", "scaleout", 1, RELEASE_BYTES, drain / 1e3, reps)
        second = g + 1 if g > 1 else (2 if nodes > 2 else None)
        if second is not None:
            _, alone = _release_calls(comm, OVERLAP_BYTES, g, None, reps)
            release, arrival = _release_calls(comm, OVERLAP_BYTES, g, second, reps)
            add("overlap-alone", "scaleout", 1, OVERLAP_BYTES, alone / 1e3, reps)
            add("overlap-release", "scaleout", 2, OVERLAP_BYTES, release / 1e3, reps)
            add("overlap", "scaleout", 2, OVERLAP_BYTES, arrival / 1e3, reps)
    if nodes > 1:
        rounds = opts["stage_rounds"]
        add("stage", "scaleout", p, 0, _stage_rounds(comm, g, rounds, reps), reps * rounds)
        steps = len(butterfly_partners(0, nodes, g))
        for k in (steps, 2 * steps):
            add("chain", "scaleout", k, 0, _chain_calls(comm, g, k, rounds), rounds)
        for k in (p - 1, 2 * (p - 1)):
            add("ring", "scaleout", k, RING_MESSAGE_BYTES, _ring_calls(comm, k, rounds), rounds)
        for n in POST_COUNTS:
            add("post", "scaleout", n, 8 * n, _posts(comm, 0, g, n, reps * 2), reps * 2)
        secs = put_rounds(comm, g, opts["dtype"], reps, 5)
        add("put", "scaleout", p, 8, secs, reps * 5)
    if steps_only:
        return points
    if nodes > 1:
        busy = busy_pairs(p, g, "scaleout")
        secs = _put_exchange(comm, g, busy, nbytes, reps)
        add("put-exchange", "scaleout", 2 * len(busy), nbytes, secs, reps)
    dtype = opts["dtype"]
    secs = _reduce_seconds(nbytes, dtype, reps) if comm.rank == 0 else 0.0
    add("reduce", "local", 1, nbytes, comm.bcast(secs, root=0), reps)
    return points


# ---------------------------------------------------------------- fitting (pure)


def _one(points: list[dict], kind: str, tier: str | None = None) -> dict | None:
    hits = [q for q in points if q["kind"] == kind and (tier is None or q["tier"] == tier)]
    return hits[0] if hits else None


def fit(
    points: list[dict], gpus_per_node: int, nranks: int, flow_control: str = "lossless"
) -> tuple[dict, dict]:
    """``([fabric] constants, what each was fitted from)`` from the raw points.

    Latency = the 8 B ping-pong's one-way time (half the round trip) with every rank
    ping-ponging at once (``pingpong-all``: what a message costs while a collective keeps
    every rank busy; on an oversubscribed machine far above the quiet ``pingpong``, kept
    between nodes as ``scaleout_latency_quiet_us``); a
    link's rate = its bytes over the stream's round trip less two quiet latencies (its
    own and the ack's); ``fabric_GBps`` = all NICs' bytes over the
    ``allnics`` time less one latency (only where it is below the NICs' sum: otherwise
    the fabric has no cap of its own); ``fabric_flows_GBps`` = that rate for k = 1 and
    for each ``flows`` point's k (where one of them is below the NICs' sum); incast = the least-squares slope of
    ``t_k / (k t_1) - 1`` over ``k - 1``; ``msg_us`` = the slope of the ``post`` times
    over n; ``exchange_GBps`` = one direction's bytes over the ``exchange`` time less one
    latency (only where it is below one NIC's stream: otherwise an exchange costs what a
    one-way flow does); ``stage_cost_us`` = an empty round less one latency and its two
    posts; ``butterfly_step_us`` / ``butterfly_call_us`` = the slope and intercept of the
    ``chain`` calls over their steps, ``ring_step_us`` / ``ring_call_us`` those of the
    ``ring`` calls; ``put_us`` = one step of a cell put both ways (the ``put`` point) less that
    latency (what NVRAR's inter-node steps pay above a message); ``scaleout_burst_bytes``
    = the bytes the ``burst`` points leave unpaid (:func:`_burst_bytes`);
    ``TIER_eager_bytes`` = the largest message sent without waiting for a late receiver
    (:func:`eager_limit`). On a ``lossy`` fabric the ``flows`` points, whose receivers
    each take k senders, lose packets, so the cap and the tail come from the k = 1 points
    alone, and ``loss_timeout_us`` and ``loss_late`` come from their rounds made late
    by a retransmission timeout (:func:`fit_loss`).
    """
    g, nodes = gpus_per_node, nranks // gpus_per_node
    c: dict[str, Any] = {}
    why: dict[str, str] = {}

    def rate(tier: str) -> tuple[float, float]:
        quiet = _one(points, "pingpong", tier)["time_us"]
        busy = _one(points, "pingpong-all", tier) or _one(points, "pingpong", tier)
        s = _one(points, "stream", tier)
        return busy["time_us"], s["bytes"] / max(s["time_us"] - 2 * quiet, 1e-3) / 1e3

    if g > 1:
        lat, bw = rate("scaleup")
        c.update(scaleup_GBps=bw, scaleup_peer_GBps=bw, scaleup_latency_us=lat)
        why.update(
            scaleup_latency_us="8 B ping-pong, half the round trip, every rank of a node paired "
            "with another of its node at once (a collective keeps every rank busy)",
            scaleup_GBps=f"one stream of {_one(points, 'stream', 'scaleup')['bytes']} B "
            "between two ranks of node 0 (8 B ack back), less two latencies",
            scaleup_peer_GBps="as scaleup_GBps (one peer at a time)",
        )
    else:
        c.update(scaleup_GBps=0.0, scaleup_peer_GBps=0.0, scaleup_latency_us=0.0)
        why.update({k: "one rank per node: no scale-up tier"
                    for k in ("scaleup_GBps", "scaleup_peer_GBps", "scaleup_latency_us")})  # fmt: skip
    if nodes < 2:
        raise UsageError(
            "calibrate needs at least two nodes (ranks on two hosts, or --gpus-per-node "
            "below the rank count) to measure the scale-out tier"
        )
    lat, nic = rate("scaleout")
    quiet = _one(points, "pingpong", "scaleout")["time_us"]
    c.update(scaleout_GBps=nic, scaleout_latency_us=lat, scaleout_latency_quiet_us=quiet,
             nics_per_node=g)  # fmt: skip
    why.update(
        scaleout_latency_us="8 B ping-pong, half the round trip, every rank paired with the "
        "rank of its index on another node at once (a collective keeps every rank busy)",
        scaleout_latency_quiet_us="8 B ping-pong, half the round trip, rank 0 with node 1 "
        "while the other ranks wait (what a message costs where few ranks exchange)",
        scaleout_GBps=f"one stream of {_one(points, 'stream', 'scaleout')['bytes']} B "
        "from rank 0 to node 1 (8 B ack back), less two latencies",
        nics_per_node="one NIC per rank: every rank streamed at once through its own (allnics)",
    )
    every = _one(points, "allnics")
    total = every["bytes"] * nranks
    whose = "the median rank's time" if "median_rank_us" in every else "the slowest rank's time"
    agg = total / max(_through_us(every) - lat, 1e-3) / 1e3
    if agg < nic * nranks * 0.95:
        c["fabric_GBps"] = agg
        why["fabric_GBps"] = (
            f"all {nranks} ranks streaming {every['bytes']} B each to the next node at once, "
            f"{whose}: {agg:.4g} GB/s in all, below {nranks} x one NIC ({nic * nranks:.4g})"
        )
    lossy = flow_control == "lossy"
    spread = [q for q in points if q["kind"] == "allnics" or (q["kind"] == "flows" and not lossy)]
    curve = [  # (k, GB/s, bytes per rank): allnics is k = 1
        (1 if q["kind"] == "allnics" else q["peers"],
         q["bytes"] * nranks / max(_through_us(q) - lat, 1e-3) / 1e3, q["bytes"])
        for q in spread
    ]  # fmt: skip
    curve.sort(key=lambda x: (x[2], x[0]))
    sizes = sorted({b for _, _, b in curve})
    if (len(curve) > len(sizes) or len(sizes) > 1) and min(
        r for _, r, _ in curve
    ) < nic * nranks * 0.95:  # by flows, or by size alone (a lossy fabric: k = 1 only)
        c["fabric_flows_GBps"] = (
            [[k, _round(r), b] for k, r, b in curve]
            if len(sizes) > 1
            else [[k, _round(r)] for k, r, _ in curve]
        )
        ks = sorted({k for k, _, _ in curve})
        why["fabric_flows_GBps"] = (
            f"all {nranks} ranks streaming {' and '.join(str(b) for b in sizes)} B each at "
            f"once, split over k ranks of other nodes (k = {', '.join(str(k) for k in ks)}; "
            "k = 1 the allnics point): the bytes of all over each time less one latency"
            + (" (one curve per size: [k, GB/s, bytes per rank])" if len(sizes) > 1 else "")
        )
    tail = fit_tail(spread, lat, nranks)
    if tail:
        c["fabric_tail"] = tail if len(sizes) > 1 else [row[:2] for row in tail]
        why["fabric_tail"] = (
            f"the same points: the slowest rank's time over the median rank's (each less "
            f"one latency), to the power 1 / log2({nranks}): the stretch per doubling of "
            "the NICs sending at once"
            + (" ([k, stretch, bytes per rank])" if len(sizes) > 1 else "")
        )
    # one rank's one-way stream with every rank streaming (the slowest: as the exchange)
    busy = min(nic, total / max(every["time_us"] - lat, 1e-3) / 1e3 / nranks)
    stream = _one(points, "stream", "scaleout")
    for kind, key, ref, ref_point, than, how in (
        ("exchange", "exchange_GBps", busy, every if busy < nic else stream, "a one-way "
         "stream with every rank streaming (allnics)", "exchanging {b} B with the rank of "
         "their index on node n ^ 1 at once, both directions of each pair together"),
        ("put-exchange", "put_exchange_GBps", nic, stream, "one NIC's stream", "putting {b} "
         "B of 8 B cells into their partner's window on another node, both of a pair at "
         "once, as NVRAR's cpu backend does"),
    ):  # fmt: skip
        rate = _exchange_rate(_one(points, kind), lat, ref, ref_point)
        if rate is not None:  # points of a calibrate before these kinds have none
            one_way, q = rate
            c[key] = one_way
            why[key] = (
                f"{q['peers']} ranks {how.format(b=q['bytes'])}: {one_way:.4g} GB/s each way, "
                f"below {than} ({ref:.4g}) beyond their passes' spread"
            )
    t1 = next(q for q in points if q["kind"] == "incast" and q["peers"] == 1)["time_us"]
    xs, ys = [], []
    for q in points:
        if q["kind"] == "incast" and q["peers"] > 1:
            k = q["peers"]
            xs.append(k - 1)
            ys.append(q["time_us"] / (k * t1) - 1)
    if xs:
        x, y = np.array(xs, float), np.array(ys, float)
        c["incast"] = max(float((x * y).sum() / (x * x).sum()), 0.0)
        why["incast"] = (
            f"k senders x {_one(points, 'incast')['bytes']} B into rank 0 "
            f"(k = {', '.join(str(int(v) + 1) for v in xs)}): slope of t_k/(k t_1) - 1 over k - 1"
        )
    loss = fit_loss(points) if lossy else None
    if loss is not None:
        c["loss_timeout_us"], c["loss_late"] = loss
        why["loss_timeout_us"] = (
            "the flows points' rank rounds on the lossy fabric, each over the allnics "
            "point's median rank at its size: the rounds standing apart (late by a "
            "retransmission timeout) over the others, the median"
        )
        why["loss_late"] = (
            "the same rounds: per flows point, the chance that a port taking k senders "
            "pays a timeout in a round, from its share of late ranks ([k, chance, bytes "
            "per rank]; the flows points lose packets too: the cap and the tail from k = 1 "
            "alone)"
        )
    overfill = fit_overfill(points, c["loss_timeout_us"], c["scaleout_GBps"]) if loss else []
    if overfill:
        c["loss_overfill"] = overfill
        why["loss_overfill"] = (
            "the hot points' rank rounds: per point, the chance that a NIC k senders "
            "overfill for that many bytes pays a timeout, from the hot rank's late rounds "
            "beside the others' ([k, chance, bytes overfilled])"
        )
    posts = sorted((q["peers"], q["time_us"]) for q in points if q["kind"] == "post")
    n = np.array([a for a, _ in posts], float)
    t = np.array([b for _, b in posts], float)
    msg = max(float(np.polyfit(n, t, 1)[0]), 0.0) if len(n) > 1 else 0.0
    c["msg_us"] = msg
    why["msg_us"] = (
        f"rank 0 posting n 8 B sends to node 1 (n = {', '.join(str(int(v)) for v in n)}): "
        "slope of the time over n"
    )
    stage = _one(points, "stage")["time_us"]
    c["stage_cost_us"] = max(stage - lat - 2 * msg, 0.0)
    why["stage_cost_us"] = (
        f"an empty exchange round with a rail partner, all ranks at once ({stage:.4g} us), "
        "less one latency and two posts"
    )
    for kind, name, calls in (
        ("chain", "butterfly", "empty exchanges with butterfly partners across nodes"),
        (
            "ring",
            "ring",
            f"steps of a {RING_MESSAGE_BYTES} B message around the ring of all ranks "
            "(to rank + 1, from rank - 1)",
        ),
    ):
        line = sorted((q["peers"], q["time_us"]) for q in points if q["kind"] == kind)
        if len(line) > 1 and line[-1][0] > line[0][0]:  # calibrations before it have none
            (k1, t1), (k2, t2) = line[0], line[-1]
            step = max((t2 - t1) / (k2 - k1), 0.0)
            c[f"{name}_step_us"] = step
            c[f"{name}_call_us"] = max(t1 - k1 * step, 0.0)
            why[f"{name}_step_us"] = (
                f"calls of k {calls}, every rank at once, each after a barrier (k = {k1}: "
                f"{t1:.4g} us, k = {k2}: {t2:.4g} us, the slowest rank): the slope over k"
            )
            why[f"{name}_call_us"] = "the same calls' intercept at k = 0 (what a call pays once)"
    put = _one(points, "put")
    if put is not None:  # profiles written before the put point have none
        c["put_us"] = max(put["time_us"] - lat, 0.0)
        why["put_us"] = (
            f"a step of one 8 B LL8 cell put both ways between ranks of nodes n and n ^ 2^k, "
            f"every rank at once, each polling its window for its partner's and reducing it "
            f"({put['time_us']:.4g} us a step, as NVRAR's cpu backend packs, puts, polls and "
            "reduces), less the two-sided latency"
        )
    burst = _burst_bytes(points, nic)
    if burst is not None:
        depth, free = burst
        c["scaleout_burst_bytes"] = depth
        sizes = sorted(q["bytes"] for q in points if q["kind"] == "burst")
        why["scaleout_burst_bytes"] = (
            f"one message of b B from rank 0 to node 1 after {BURST_IDLE_S:g} s idle "
            f"(b = {', '.join(str(b) for b in sizes)}): above the 8 B one, the larger "
            f"left {' and '.join(f'{f:.0f}' for f in free)} B unpaid at the stream's rate"
        )
    for tier in ("scaleup", "scaleout") if g > 1 else ("scaleout",):
        limit = eager_limit(points, tier)
        if limit is not None:  # calibrations before the eager points have none
            to = "a rank of its node" if tier == "scaleup" else "node 1"
            sizes = [q["bytes"] for q in points if q["kind"] == "eager" and q["tier"] == tier]
            c[f"{tier}_eager_bytes"] = limit
            why[f"{tier}_eager_bytes"] = (
                f"rank 0 sending b B to {to}, whose receive is posted "
                f"{EAGER_LATE_S * 1e3:g} ms late (b = {_sizes_text(sizes)}): the largest b "
                "up to which every send returned in under half that"
            )
    held = _send_buffer(points, nic)
    if held is not None:
        c.update(held[0])
        why.update(held[1])
    red = _one(points, "reduce")
    c["reduce_GBps"] = red["GBps"]
    why["reduce_GBps"] = f"reducing {red['bytes']} B into a buffer on rank 0"
    return {k: _round(v) for k, v in c.items()}, why


def _send_buffer(points: list[dict], nic_GBps: float) -> tuple[dict, dict] | None:
    """``scaleout_send_buffer_bytes`` and ``scaleout_queue_bytes`` with their reasons from
    the ``release`` and ``overlap`` points (None without a ``release`` point, or where
    less than 1 % of its message was on its way when the send returned)."""
    rel = _one(points, "release")
    if rel is None:
        return None
    quiet = _one(points, "pingpong", "scaleout")["time_us"]
    held = max(rel["time_us"] - quiet, 0.0) * nic_GBps * 1e3
    if held < 0.01 * rel["bytes"]:
        return None
    c = {"scaleout_send_buffer_bytes": held}
    why = {"scaleout_send_buffer_bytes": (
        f"rank 0 sending {rel['bytes']} B to node 1: its send returned "
        f"{rel['time_us'] / 1e3:.4g} ms before the message arrived; that less one latency "
        "at the stream's rate"
    )}  # fmt: skip
    alone, start, both = (_one(points, k) for k in ("overlap-alone", "overlap-release", "overlap"))
    if alone is not None and start is not None and both is not None:
        ms = [q["time_us"] / 1e3 for q in (alone, start, both)]
        if ms[2] > ms[1]:
            queued = queued_ahead(alone["bytes"], ms[0], ms[1], ms[2])
            c["scaleout_queue_bytes"] = queued
            why["scaleout_queue_bytes"] = (
                f"rank 0 sending {alone['bytes']} B to node 1, alone ({ms[0]:.4g} ms) and "
                f"with a second to another rank started when the first send returned "
                f"({ms[1]:.4g} ms): the first arrived at {ms[2]:.4g} ms, as if {queued:.0f} B "
                "of it left ahead of the second and the two then split the NIC evenly (its "
                "bytes left at the release at the rate it had alone)"
            )
    return c, why


def eager_limit(points: list[dict], tier: str) -> int | None:
    """The largest ``eager`` size of ``tier`` up to which every send returned in under
    half the receiver's lateness (0 where the smallest did not); None without the points."""
    sizes = sorted((q["bytes"], q["time_us"]) for q in points
                   if q["kind"] == "eager" and q["tier"] == tier)  # fmt: skip
    if not sizes:
        return None
    limit = 0
    for nbytes, us in sizes:
        if us >= EAGER_LATE_S * 1e6 / 2:
            break
        limit = nbytes
    return limit


def _sizes_text(sizes) -> str:
    """``1K, 2K, ...`` for a list of byte counts."""
    from commbench.units import format_size

    return ", ".join(format_size(int(b)) for b in sizes)


def _burst_bytes(points: list[dict], nic_GBps: float) -> tuple[float, list[float]] | None:
    """A token bucket's depth from the ``burst`` points: for each larger size b, the
    bytes its time above the 8 B round trip does not pay at the stream's rate,
    ``b - (t_b - t_8) * rate``; ``(their mean, each)`` where both agree (within a factor
    of two) on at least a tenth of the smaller message and the smaller did pay the rate
    for some of its bytes, else None (a NIC that sends every byte at its rate, noise,
    or a bucket too deep for these sizes)."""
    bursts = sorted((q["bytes"], q["time_us"]) for q in points if q["kind"] == "burst")
    if len(bursts) < 3:
        return None
    (_, base), *sized = bursts
    per_us = nic_GBps * 1e3
    free = [b - max(t - base, 0.0) * per_us for b, t in sized]
    small = sized[0][0]
    if 0.1 * small <= min(free) and max(free) <= 2 * min(free) and free[0] < 0.9 * small:
        return float(np.mean(free)), free
    return None


def _exchange_rate(
    point: dict | None, lat: float, ref: float, ref_point: dict | None
) -> tuple[float, dict] | None:
    """One direction's GB/s of an exchange point (its bytes over its time less one
    latency) and the point, where it is below ``ref`` (what a one-way flow reaches, from
    ``ref_point``) by more than the two points' passes spread: its fastest pass below
    0.95 of the reference's rate in its slowest pass. Else None: the exchange has no
    limit of its own. A margin of 5 % on the medians alone let noise decide (q23ar's 8x1:
    9.56 against 10.18 MB/s kept, passes 106-111 ms against 99-108; the model's
    exchanges then ran 1.10-1.18 slow where a one-way flow's rate gave 1.02-1.11)."""
    if point is None:
        return None
    one_way = point["bytes"] / max(point["time_us"] - lat, 1e-3) / 1e3
    fastest = point["bytes"] / max(min(_passes(point)) - lat, 1e-3) / 1e3
    slowest_ref = ref * (ref_point["time_us"] / max(_passes(ref_point)) if ref_point else 1.0)
    return (one_way, point) if fastest < slowest_ref * 0.95 else None


def _passes(point: dict) -> list[float]:
    """Each pass's time of a point (its one time where the passes were not kept)."""
    return list(point.get("passes_us") or [point["time_us"]])


def _round(v):
    return float(f"{v:.5g}") if isinstance(v, float) else v


# ---------------------------------------------------------------- the profile (pure)


def profile_data(
    base: dict,
    name: str,
    constants: dict,
    reasons: dict,
    run: str,
    gpus_per_node: int,
    flow_control: str,
    scaleout_name: str | None = None,
) -> dict:
    """The profile as TOML data: ``base`` (a shipped profile's tables) with this run's
    name, node size and ``[fabric]`` (every constant's source ``measured: RUN: ...``)."""
    data = json.loads(json.dumps(base))  # a deep copy of plain TOML values
    data["name"] = name
    data["description"] = f"calibrated by commbench calibrate ({run}) from {base['name']}"
    data["devices"]["gpus_per_node"] = gpus_per_node
    data["devices"]["servers_per_node"] = 1
    old = base.get("fabric", {})
    fabric: dict[str, Any] = {
        "scaleup": old.get("scaleup", "scale-up"),
        "scaleout": scaleout_name or old.get("scaleout", "scale-out"),
    }
    sources = {}
    for key, value in constants.items():
        if key == "incast":
            key = f"incast_{flow_control}"
        fabric[key] = value
        sources[key] = f"measured: {run}: {reasons['incast' if key.startswith('incast_') else key]}"
    if "incast" in constants:
        fabric["flow_control"] = flow_control
        sources["flow_control"] = f"measured: {run}: the fabric as it ran (given as {flow_control})"
    fabric["sources"] = sources
    data["fabric"] = fabric
    return data


def refresh_steps(
    data: dict,
    old: list[dict],
    new: list[dict],
    run: str,
    name: str,
    gpus_per_node: int,
    nranks: int,
) -> tuple[dict, list[dict], dict]:
    """A calibrated profile (its TOML ``data`` and raw points ``old``), renamed ``name``,
    with the :data:`STEP_KEYS` fitted again, ``new`` (points of ``run``) in place of the
    points they measure again; every other constant and its source kept as it was.

    Returns ``(the profile's data, every raw point after the swap, the refitted
    constants)``."""
    fresh = {_point_id(q): {**q, "run": run} for q in new}
    merged = [fresh.pop(_point_id(q), q) for q in old] + list(fresh.values())
    constants, why = fit(merged, gpus_per_node, nranks,
                         data.get("fabric", {}).get("flow_control", "lossless"))  # fmt: skip
    out = json.loads(json.dumps(data))  # a deep copy of plain TOML values
    out["name"] = name
    fabric = out.setdefault("fabric", {})
    sources = fabric.setdefault("sources", {})
    keys = [k for k in STEP_KEYS if k in constants]
    for key in keys:
        fabric[key] = constants[key]
        sources[key] = f"measured: {run}: {why[key]}"
    out["description"] = f"{data.get('description', '')}; its step costs measured again ({run})"
    return out, merged, {k: constants[k] for k in keys}


def pool_updates(profile: Path, updates: list[Path], out: Path) -> dict:
    """``profile`` with its :data:`STEP_KEYS` fitted from the median, point by point, of
    the step points that several ``--update`` runs of it measured (``updates``, their
    profiles): a machine's fixed costs sampled across a period rather than at one
    moment. Writes ``out`` and its raw points; returns the pooled constants. Pure but for
    the files."""
    old = read_points(profile)
    data = tomllib.loads(profile.read_text())
    runs, lists = [], []
    for path in updates:  # an update's step points are all its own run's
        lists.append([q for q in read_points(path) if q["kind"] in STEP_KINDS])
        runs.append(lists[-1][0]["run"])
    pooled = [{k: v for k, v in q.items() if k != "run"} for q in combine_passes(lists)]
    label = f"median of {len(runs)} calibrate --update runs, {runs[0]} .. {runs[-1]}"
    g = data["devices"]["gpus_per_node"]
    nranks = next(q["peers"] for q in old if q["kind"] == "stage")
    new, merged, constants = refresh_steps(data, old, pooled, label, out.stem, g, nranks)
    text = dump_toml(new, header=(
        f"Written by commbench's validation: {profile.name} with "
        f"{', '.join(constants)} from the {label}."))  # fmt: skip
    write_atomic(points_path(out), "".join(json.dumps(r) + "\n" for r in merged))
    write_atomic(out, text)
    return constants


def refit_profile(profile: Path, out: Path) -> dict:
    """``profile`` (a full calibration's) fitted again from its raw points by this
    version's :func:`fit`, written to ``out`` with a copy of the points: what a model
    change makes of measurements already taken, none measured again. Returns the
    constants. Pure but for the files."""
    try:
        data = tomllib.loads(profile.read_text())
        points = read_points(profile)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{profile}: cannot refit it ({exc}); give a profile calibrate "
                         "wrote, with its raw points beside it") from None  # fmt: skip
    runs = sorted({q.get("run") for q in points})
    if len(runs) != 1:
        raise UsageError(f"{profile}: its points come from {len(runs)} runs; refit a full "
                         "calibration's profile (not an --update or a pooled one)")  # fmt: skip
    g = data["devices"]["gpus_per_node"]
    nranks = next(q["peers"] for q in points if q["kind"] == "stage")
    fabric = data.get("fabric", {})
    flow_control = fabric.get("flow_control", "lossless")
    constants, why = fit(points, g, nranks, flow_control)
    new = profile_data(data, out.stem, constants, why, runs[0], g, flow_control,
                       fabric.get("scaleout"))  # fmt: skip
    new["description"] = f"{data.get('description', '')}; refitted from its raw points"
    text = dump_toml(new, header=f"{profile.name} fitted again from its raw points "
                                 f"({points_path(profile).name}) by this version's model.")  # fmt: skip
    write_atomic(points_path(out), points_path(profile).read_text())
    write_atomic(out, text)
    return constants


def _toml_key(key: str) -> str:
    import re

    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            raise ValueError("NaN has no place in a profile")
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise ValueError(f"cannot write {v!r} to TOML")


def dump_toml(data: dict, header: str = "") -> str:
    """``data`` (tables of strings, numbers, booleans and arrays) as TOML text."""
    lines = [f"# {line}" for line in header.splitlines()]

    def table(path: list[str], tab: dict) -> None:
        scalars = {k: v for k, v in tab.items() if not isinstance(v, dict)}
        subs = {k: v for k, v in tab.items() if isinstance(v, dict)}
        if path and (scalars or not subs):
            lines.extend(["", "[" + ".".join(_toml_key(k) for k in path) + "]"])
        for k, v in scalars.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in subs.items():
            table([*path, k], v)

    table([], data)
    return "\n".join(lines).lstrip("\n") + "\n"


def run_id(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"calibrate-{now.strftime('%Y%m%dT%H%M%SZ')}-{socket.gethostname()}"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def points_path(profile_path: Path) -> Path:
    return profile_path.with_name(profile_path.name.removesuffix(".toml") + ".points.jsonl")


def read_points(profile_path: Path) -> list[dict]:
    """The raw points written next to a profile (one JSON object per line)."""
    text = points_path(profile_path).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# ---------------------------------------------------------------- the command


def add_arguments(p) -> None:
    p.add_argument("--out", "-o", required=True, help="the profile to write (NAME.toml); the "
                   "raw points go next to it (NAME.points.jsonl)")  # fmt: skip
    p.add_argument("--base", default="local-cluster",
                   help="shipped profile whose launcher, devices and environment the new one "
                   "keeps (default local-cluster)")  # fmt: skip
    p.add_argument("--gpus-per-node", type=int, default=None,
                   help="ranks per node (default: ranks sharing a host)")  # fmt: skip
    p.add_argument("--bytes", default="1M", help="stream, all-NICs and reduction size (1M)")
    p.add_argument("--fabric-bytes", default="4M",
                   help="more sizes for the all-NICs and flows points, comma-separated "
                   "(4M; 0: none): the cap's rate, its tail and loss by bytes per NIC")  # fmt: skip
    p.add_argument("--incast-bytes", default="256K", help="bytes per incast sender (256K)")
    p.add_argument("--reps", type=int, default=5, help="rounds per point and pass, median kept (5)")
    p.add_argument("--passes", type=int, default=3,
                   help="passes over every point, seconds apart; each point the median of "
                   "its passes (3)")  # fmt: skip
    p.add_argument("--stage-rounds", type=int, default=20, help="empty rounds per stage point")
    p.add_argument("--flow-control", choices=("lossless", "lossy"), default="lossless",
                   help="the fabric as it runs (default lossless); lossy: its flows points "
                   "give loss_timeout_us and loss_late and its cap comes from k = 1 alone")  # fmt: skip
    p.add_argument("--loss-rounds", type=int, default=15,
                   help="rounds per flows point and pass on a lossy fabric (15): each "
                   "round a rank is late by a timeout or not, and the share late is the "
                   "loss chance the model charges, so it takes more rounds than a time")  # fmt: skip
    p.add_argument("--hot-bytes", default="128K,256K,512K",
                   help="on a lossy fabric, the bytes the hot points' senders overfill a NIC "
                   "with, comma-separated (128K,256K,512K): loss_overfill by bytes")  # fmt: skip
    p.add_argument("-d", "--datatype", default="bf16", help="element type reduced (bf16)")
    p.add_argument("--scaleout", default=None, help="the scale-out fabric's name in the profile")
    p.add_argument("--update", default=None, metavar="PROFILE.toml",
                   help="measure only a step's fixed costs (the 8 B ping-pongs, the posting "
                   "cost, the empty stage round, the butterfly chains, the ring's steps, the "
                   "put step) and "
                   "write PROFILE, a "
                   "calibrated one, with those fitted again and every other constant kept "
                   "(its raw points file supplies the rest; --base is not used)")  # fmt: skip


def check_arguments(args) -> tuple[dict, dict]:
    """``(base profile's TOML data, measuring options)``; ``UsageError`` on bad input,
    before MPI starts or anything is written."""
    from commbench.config import load_toml
    from commbench.harness.backends.dtypes import parse_dtype
    from commbench.harness.results import check_output_path
    from commbench.jobs.profile import load_profile
    from commbench.units import parse_size

    out = Path(args.out)
    if out.suffix != ".toml":
        raise UsageError(f"--out {args.out}: name the profile NAME.toml")
    check_output_path(out, "--out")
    check_output_path(points_path(out), "--out (its raw points file)")
    opts: dict[str, Any] = {"steps_only": bool(args.update)}
    if args.update:
        data, opts["old_points"] = _calibrated(Path(args.update))
    else:
        data = load_toml(load_profile(args.base).path)
    opts |= {
        "bytes": parse_size(args.bytes),
        "incast_bytes": parse_size(args.incast_bytes),
        "fabric_bytes": [parse_size(b) for b in args.fabric_bytes.split(",")],
        "reps": args.reps,
        "passes": args.passes,
        "stage_rounds": args.stage_rounds,
        "loss_rounds": args.loss_rounds,
        "flows_rounds": args.loss_rounds if args.flow_control == "lossy" else args.reps,
        "dtype": parse_dtype(args.datatype),
        "hot_bytes": [parse_size(b) for b in args.hot_bytes.split(",") if b]
        if args.flow_control == "lossy"
        else [],
    }
    if any(b < 1 for b in opts["hot_bytes"]):
        raise UsageError(f"--hot-bytes {args.hot_bytes}: each size at least 1 byte")
    for key in ("bytes", "incast_bytes", "reps", "passes", "stage_rounds", "loss_rounds"):
        if opts[key] < 1:
            raise UsageError(f"--{key.replace('_', '-')} must be at least 1 (got {opts[key]})")
    return data, opts


def _calibrated(path: Path) -> tuple[dict, list[dict]]:
    """``--update``'s profile: its TOML data and raw points; ``UsageError`` unless both
    are there and the points are a calibrate's."""
    from commbench.config import load_toml

    points = points_path(path)
    if path.suffix != ".toml" or not path.is_file():
        raise UsageError(f"--update {path}: no such profile; give a NAME.toml calibrate wrote")
    try:
        rows = read_points(path)
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(
            f"--update {path}: its raw points {points} cannot be read ({exc}); "
            "run a full calibrate first"
        ) from None
    if not rows or any(not set(POINT_KEYS) <= set(r) for r in rows):
        raise UsageError(f"--update {path}: {points} holds no calibrate points; run a full "
                         "calibrate first")  # fmt: skip
    return load_toml(path), rows


def _check_same_shape(data: dict, old: list[dict], topo, source: str) -> None:
    """``--update`` on the shape its profile was calibrated on (its points are per shape)."""
    g = data.get("devices", {}).get("gpus_per_node")
    ranks = {q["peers"] for q in old if q["kind"] == "stage"}
    if g != topo.gpus_per_node or ranks != {topo.size}:
        was = "/".join(str(r) for r in sorted(ranks)) or "unknown"
        raise UsageError(
            f"--update {source}: calibrated on {was} ranks, {g} per node; this run "
            f"has {topo.size}, {topo.gpus_per_node} per node: update it on the same shape"
        )


def run_calibrate(args) -> int:
    import sys

    from commbench.jobs.profile import parse_profile

    base, opts = check_arguments(args)  # before MPI: rank 0 says what is wrong (cli.main)
    from mpi4py import MPI

    from commbench.cluster.netns import current_fabric
    from commbench.harness.topology import Topology

    comm = MPI.COMM_WORLD
    try:
        topo = Topology.create(comm, args.gpus_per_node)
        if topo.nodes < 2:
            if topo.rank:
                return 2
            raise UsageError(
                "calibrate needs ranks on at least two nodes to measure the scale-out tier: "
                "start it on two hosts or give --gpus-per-node below the rank count"
            )
        if args.update:
            try:
                _check_same_shape(base, opts["old_points"], topo, args.update)
            except UsageError:
                if topo.rank:
                    return 2
                raise
        run = comm.bcast(run_id() if comm.rank == 0 else None, root=0)
        points = measure(topo.world, topo.gpus_per_node, opts)
        if topo.rank != 0:
            return 0
        out = Path(args.out)
        what = f"each point the median of {opts['passes']} passes of {opts['reps']} rounds"
        if args.flow_control == "lossy":
            what += f" ({opts['flows_rounds']} for the flows points: their share of late ranks)"
        if args.update:
            data, rows, constants = refresh_steps(base, opts["old_points"], points, run,
                                                  out.stem, topo.gpus_per_node, topo.size)  # fmt: skip
            what = (f"{', '.join(constants)} measured again ({what}), every other constant "
                    f"as in {args.update}")  # fmt: skip
        else:
            constants, reasons = fit(points, topo.gpus_per_node, topo.size, args.flow_control)
            data = profile_data(base, out.stem, constants, reasons, run, topo.gpus_per_node,
                                args.flow_control, args.scaleout)  # fmt: skip
            rows = [{"run": run, **q} for q in points]
        fabric = current_fabric() or {}
        tcp = f" (emulated, TCP {fabric['tcp_congestion']})" if "tcp_congestion" in fabric else ""
        text = dump_toml(data, header=(
            f"Written by `commbench calibrate` ({run}) on {topo.nodes} nodes x "
            f"{topo.gpus_per_node} ranks{tcp}, {what};\nraw points: {points_path(out).name}. "
            "Microbenchmarks only: no collective it predicts was measured."))  # fmt: skip
        parse_profile(tomllib.loads(text), out)  # what we write reads back as a profile
        write_atomic(points_path(out), "".join(json.dumps(r) + "\n" for r in rows))
        write_atomic(out, text)
    except UsageError:
        raise
    except BaseException as exc:  # one rank's failure ends the whole job, with its message
        print(f"commbench calibrate: rank {comm.rank}: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)  # fmt: skip
        comm.Abort(1)
    print(f"# {run}: {topo.nodes} nodes x {topo.gpus_per_node} ranks")
    for key, value in constants.items():
        print(f"  {key:20s} {value}")
    print(f"# profile {out}; raw points {points_path(out)}")
    return 0
