"""Modelled all-reduce: NVRAR (hierarchical), ring, recursive doubling, Rabenseifner, NCCL-like.

``n`` is the buffer size in bytes, P = N nodes x g GPUs, rank = node * g + local index.
Every message pays the latency of the tier it crosses (``nic_us`` between nodes,
``scaleup_us`` inside one) plus its bytes over that tier's bandwidth; a reduction of ``m``
bytes costs ``m / reduce_GBps``. A step of the flat host-driven algorithms (ring,
recursive doubling, Rabenseifner: each rank posts a receive and a send and waits) is one
grouped call, charged as the all-to-allv model's steps are: ``stage_us`` and ``msg_us``
per posted message. NVRAR pays ``stage_us`` once per launched phase and, per inter-node
step, the transport's ``put_us``. These are the α-β-γ models of the NVRAR paper:

* ``ring`` (flat, one ring over all P ranks): 2(P-1) steps of n/P bytes on the slowest
  link of the ring (a NIC once N > 1): 2(P-1)α + 2((P-1)/P)nβ + ((P-1)/P)nγ.
* ``recursive-doubling`` (flat): at step k rank r exchanges n bytes with r XOR 2^k and
  adds them; a step crosses the NICs when a pair spans two nodes. A non-power-of-two
  count first folds the extra ranks into a power-of-two subset and returns the result to
  them at the end (one extra step each way).
* ``rabenseifner`` (flat): reduce-scatter by recursive halving (step k exchanges
  n / 2^(k+1) with r XOR P/2^(k+1), farthest partner first, as this suite's
  implementation does; Open MPI's, under ``mpi``, starts with the nearest) and
  all-gather by recursive doubling back; same fold for non-powers of two.
* ``nvrar``: intra-node reduce-scatter (the faster of a ring and a direct exchange to all
  peers at once), recursive doubling on n/g bytes between same-index GPUs of different
  nodes — one-sided puts of LL8 cells, each step paying the transport's ``put_us`` and
  moving its payload at the LL protocol's share of the NIC — then the intra-node
  all-gather. Three launched phases (one when g = 1: plain recursive doubling).
* ``mpi``: ``MPI_Allreduce`` as Open MPI 5 runs it: ``coll/han`` (:func:`han`: intra-node
  reduce, inter-node reduce and broadcast among the node leaders, intra-node broadcast,
  pipelined over 64 KiB segments) when the ranks span several nodes with more than one
  on a node; otherwise ``coll/tuned``'s choice by rank count and size
  (:data:`OMPI_ALLREDUCE`): recursive doubling for small buffers, Rabenseifner (or a
  ring) for large ones.
* ``nccl``: NCCL's own choice among tree/ring x LL/LL128/Simple with the constants of its
  ``tuning.cc`` (:mod:`commbench.kernels.model.nccl`), plus the host proxy's cost on every network
  step (``proxy_us``).

All ranks finish together except where a fold makes some wait longer. Where the fabric
has token buckets (``nic_burst_bytes``) a prediction is a call of the harness's timed
loop, which finds them as the previous call left them; every host-driven model's
``after_rest=True`` is the first call after a rest instead (every bucket full).
"""

from __future__ import annotations

import math

import numpy as np

from commbench.kernels.model import nccl as nccl_table
from commbench.kernels.model.alltoallv import Prediction
from commbench.kernels.model.fabric import Fabric

ALGORITHMS = ("nvrar", "ring", "recursive-doubling", "rabenseifner", "nccl", "mpi")

#: Open MPI ``coll/tuned``'s fixed all-reduce decision for commutative operations:
#: per communicator size below a bound, (size bound in bytes, algorithm) rows, the first
#: row whose bound the buffer is under wins (None: every size). Algorithms are those
#: modelled here (its ring and segmented ring as ``ring``; its "nonoverlapping" reduce +
#: broadcast of 128+ ranks as ``rabenseifner``, not modelled separately).
OMPI_ALLREDUCE = (
    (4, ((8, "ring"), (4096, "recursive-doubling"), (8192, "ring"),
         (16384, "recursive-doubling"), (262144, "ring"), (None, "rabenseifner"))),
    (8, ((16, "ring"), (8192, "recursive-doubling"), (None, "rabenseifner"))),
    (16, ((8192, "recursive-doubling"), (None, "rabenseifner"))),
    (32, ((64, "ring"), (4096, "recursive-doubling"), (None, "rabenseifner"))),
    (64, ((128, "ring"), (None, "rabenseifner"))),
    (128, ((262144, "recursive-doubling"), (None, "rabenseifner"))),
    (None, ((None, "rabenseifner"),)),
)  # fmt: skip


def ompi_allreduce_algorithm(nranks: int, n: int) -> str:
    """The algorithm Open MPI's ``coll/tuned`` runs for an n-byte commutative
    ``MPI_Allreduce`` on ``nranks`` ranks (:data:`OMPI_ALLREDUCE`)."""
    for ranks_below, rows in OMPI_ALLREDUCE:
        if ranks_below is None or nranks < ranks_below:
            return next(a for below, a in rows if below is None or n < below)
    raise AssertionError("unreachable: the table ends with a catch-all")


def mpi(n: int, nodes: int, fabric: Fabric, *, after_rest: bool = False) -> Prediction:
    """``MPI_Allreduce`` as Open MPI 5 runs it: ``coll/han`` (:func:`han`) on a
    communicator spanning nodes with several ranks per node, otherwise ``coll/tuned``'s
    flat algorithm over all ranks (host-posted messages). ``after_rest``: see
    :func:`predict`."""
    _check(n, nodes, fabric)
    p = nodes * fabric.gpus_per_node
    if p == 1:
        return Prediction("mpi", np.full(1, fabric.stage_us), 0.0, {"algo": "none"})
    if han_applies(nodes, fabric.gpus_per_node):
        pred = han(n, nodes, fabric, after_rest=after_rest)
        return Prediction("mpi", pred.rank_finish_us, pred.lower_bound_us, pred.info)
    algo = ompi_allreduce_algorithm(p, n)
    if algo == "rabenseifner":
        pred = rabenseifner(n, nodes, fabric, nearest_first=True, after_rest=after_rest)
    else:
        pred = predict(algo, n, nodes, fabric, after_rest=after_rest)
    return Prediction("mpi", pred.rank_finish_us, pred.lower_bound_us, {**pred.info, "algo": algo})


#: ``coll_han_allreduce_segsize``: HAN pipelines its four sub-collectives over segments
#: of this many bytes (Open MPI 5.0 default, ``ompi_info --all``)
HAN_SEGMENT_BYTES = 65536
#: bytes per element assumed where libnbc's reduce picks its algorithm by element count
#: (reduce-scatter + gather needs at least half the next power of two of the leaders in
#: elements): the choice changes only for buffers of a few bytes, so 4-byte elements
#: stand for every type
HAN_ELEMENT_BYTES = 4


def han_applies(nodes: int, gpus_per_node: int) -> bool:
    """Whether Open MPI 5 runs ``MPI_Allreduce`` through ``coll/han``.

    HAN's priority (35) is above ``coll/tuned``'s (30), so it is selected on every
    intra-communicator with ranks on more than one node (``mca_coll_han_comm_query``
    refuses only single-node ones); on its first collective it gives the communicator
    back to tuned when no node holds more than one rank (``mca_coll_han_comm_create``:
    "not yet optimized for a single process per node"). So: several nodes and several
    ranks per node.
    """
    return nodes > 1 and gpus_per_node > 1


def _ceil_log2(m: int) -> int:
    return (m - 1).bit_length()


def _paid(
    fabric: Fabric, sizes: list[float], tokens: float, back_to_back: bool = False
) -> tuple[list[float], float]:
    """Bytes of each of one NIC's messages in a HAN sub-collective, in order, that pay
    the NIC's rate (its token bucket passes the rest at once), and the tokens left.
    The bucket holds ``tokens`` at the first message (:func:`han`: a call's first
    segment finds what the previous call left, refilled through the barrier; HAN's
    pipeline keeps the leaders' NICs busy, so later segments find it empty). Between
    messages it refills while the next is posted (``back_to_back``: a linear broadcast's
    copies) or posted and its latency runs (a step after a step)."""
    gap = fabric.msg_us + (0.0 if back_to_back else fabric.nic_us)
    paid = []
    for b in sizes:
        free, tokens = fabric.drain_bucket(tokens, gap, b)
        paid.append(b - float(free))
    return paid, float(tokens)


def _inter_reduce(s: float, nodes: int, fabric: Fabric, tokens: float = 0.0,
                  inbound: float = 0.0) -> tuple[str, float, float, float, float, float]:  # fmt: skip
    """libnbc's ``MPI_Ireduce`` of s bytes to leader 0 among ``nodes`` leaders (HAN's up
    level): ``(algorithm, serial part, sent, received, tokens left, inbound left)`` of
    the root's path: its latencies and reductions, and the wire time of what its NIC
    sends and receives (the two directions of a NIC run side by side).

    Two sets of token buckets (:func:`_paid`): ``tokens``, the root's NIC's, pays what
    the root sends (and the broadcast after); ``inbound``, those on the way in, pays what
    it receives: its switch port's, which meets every message the root receives in
    turn, and the sending leaders' NICs', each meeting a prefix of the same sequence.
    Both idle while the root broadcasts, so a call's reduce finds them as the previous
    call's reduce left them refilled over its broadcast, where the root's own NIC has
    just sent every copy; the root's NIC rests in turn while the reduce comes in.

    libnbc's choice (``nbc_ireduce.c``, commutative op): reduce-scatter + gather when
    nodes > 2 and the count reaches half the next power of two; else binomial when
    nodes > 4 or under 64 KiB; else a chain of 8 KiB segments.
    """
    post, alpha = fabric.msg_us, fabric.nic_us

    def wire(paid: float, concurrent: int, message: float) -> float:
        return _wire(fabric, paid, concurrent, message)

    pof2 = 1 << _ceil_log2(nodes + 1) >> 1  # opal_next_poweroftwo(p) >> 1
    if nodes > 2 and s / HAN_ELEMENT_BYTES >= pof2:
        return _reduce_scatter_gather(s, nodes, fabric, tokens, inbound)
    if nodes > 4 or s < 65536:  # the root only receives, a message a step
        steps = _ceil_log2(nodes)
        serial = steps * (post + alpha + float(fabric.reduce_time_us(s)))
        arrive, in_left = _paid(fabric, [s] * steps, inbound)
        received = sum(wire(b, nodes // 2, s) for b in arrive)
        left = _rested(fabric, tokens, serial + received)
        return "binomial", serial, 0.0, received, left, in_left
    seg = min(8192.0, s)
    nseg = max(1, math.ceil(s / seg))
    arrive, in_left = _paid(fabric, [seg] * nseg, inbound)
    hops = [wire(b, nodes - 1, seg) + float(fabric.reduce_time_us(seg)) for b in arrive]
    serial = (nodes - 1) * (post + alpha) + (nseg - 1) * post
    # the first segment crosses every hop, the others follow it one hop apart
    received = (nodes - 1) * hops[0] + sum(hops[1:])
    left = _rested(fabric, tokens, serial + received)
    return "chain", serial, 0.0, received, left, in_left


def _wire(fabric: Fabric, paid: float, concurrent: int, message: float,
          exchange: bool = False) -> float:  # fmt: skip
    """Wire time of a HAN message of ``message`` bytes whose ``paid`` bytes pay the NIC's
    rate, ``concurrent`` such messages crossing at once; an exchange's direction lasts
    at least its bytes over ``exchange_GBps``."""
    t = float(fabric.wire_time_us(paid, concurrent, message_bytes=message))
    return float(max(t, fabric.exchange_time_us(paid))) if exchange else t


def _rested(fabric: Fabric, tokens: float, idle_us: float) -> float:
    """A bucket of ``tokens`` refilled over ``idle_us``."""
    return float(fabric.drain_bucket(tokens, idle_us, 0.0)[1])


def _reduce_scatter_gather(
    s: float, nodes: int, fabric: Fabric, tokens: float, inbound: float
) -> tuple[str, float, float, float, float, float]:
    """:func:`_inter_reduce`'s reduce-scatter + gather, step by step on the root's clock:
    extra leaders fold in, then each recursive-halving step exchanges a half (the step
    lasts the longer of its two directions, each paying its own bucket), then the
    binomial gather brings the pieces back, smallest first, while the root's NIC rests.
    ``received`` is the root's wire path (so ``serial + received`` is the reduce's time
    on its own; ``sent``, what its NIC sends, adds to a pipelined broadcast's copies)."""
    post, alpha = fabric.msg_us, fabric.nic_us
    p2 = 1 << _log2_floor(nodes)
    halves = [s / 2 ** (i + 1) for i in range(_log2_floor(p2))]
    t = serial = sent = path = 0.0
    out = [float(tokens), 0.0]  # the root's NIC: tokens, when it last sent
    into = [float(inbound), 0.0]  # its switch port (and the senders' NICs)

    def paid(bucket: list[float], nbytes: float) -> float:
        free, bucket[0] = fabric.drain_bucket(bucket[0], t - bucket[1], nbytes)
        return nbytes - float(free)

    def receive(nbytes: float, concurrent: int, message: float) -> None:
        nonlocal t, serial, path
        t += post + alpha
        serial += post + alpha
        w = _wire(fabric, paid(into, nbytes), concurrent, message)
        t, path = t + w, path + w
        into[1] = t

    if p2 < nodes:  # extra leaders fold in first
        receive(s, nodes - p2, s)
        t += float(fabric.reduce_time_us(s))
        serial += float(fabric.reduce_time_us(s))
    for half in halves:  # recursive halving: a half each way
        t += post + alpha
        serial += post + alpha
        w_out = _wire(fabric, paid(out, half), p2, half, exchange=True)
        w_in = _wire(fabric, paid(into, half), p2, half, exchange=True)
        out[1], into[1] = t + w_out, t + w_in
        sent += w_out
        t, path = t + max(w_out, w_in), path + max(w_out, w_in)
        t += float(fabric.reduce_time_us(half))
        serial += float(fabric.reduce_time_us(half))
    for half in halves[::-1]:  # the binomial gather back to the root
        receive(half, p2, half)
    left = _rested(fabric, out[0], t - out[1])
    return "reduce-scatter+gather", serial, sent, path, left, float(into[0])


def _inter_bcast(s: float, nodes: int, fabric: Fabric,
                 tokens: float = 0.0) -> tuple[str, float, float, float, float]:  # fmt: skip
    """libnbc's ``MPI_Ibcast`` of s bytes from leader 0 (``nbc_ibcast.c``): linear up
    to 4 leaders, binomial under 64 KiB, else a chain of 8 KiB (32 KiB from 512 KiB)
    segments. Returns ``(algorithm, latency part, sent, received, tokens left)`` of the
    root (which only sends; ``tokens``: its bucket at the start, :func:`_paid`)."""
    post, alpha = fabric.msg_us, fabric.nic_us
    if nodes <= 4:  # the root's NIC carries every copy
        lat = (nodes - 1) * post + alpha
        copies, left = _paid(fabric, [s] * (nodes - 1), tokens, back_to_back=True)
        sent = float(fabric.nic_time_us(sum(copies)))
        return "linear", lat, sent, 0.0, left
    if s < 65536:
        steps = _ceil_log2(nodes)
        paid, left = _paid(fabric, [s] * steps, tokens)  # the root sends at every step
        return "binomial", steps * (post + alpha), float(fabric.nic_time_us(sum(paid))), 0.0, left
    seg = 8192.0 if s < 524288 else 32768.0
    nseg = max(1, math.ceil(s / seg))
    paid, left = _paid(fabric, [seg] * nseg, tokens)
    hops = [float(fabric.wire_time_us(b, nodes - 1, nic_bytes=s, message_bytes=seg)) for b in paid]
    lat = (nodes - 1) * (post + alpha) + (nseg - 1) * post
    return "chain", lat, (nodes - 1) * hops[0] + sum(hops[1:]), 0.0, left


def _intra_tree(s: float, fabric: Fabric, reduce: bool) -> float:
    """tuned's reduce to (or broadcast from) local rank 0 of s bytes among a node's g
    ranks (HAN's low level), as a binomial tree: ⌈log2 g⌉ scale-up messages (with g = 2,
    as on the emulated 4x2, every algorithm of tuned is this one message)."""
    steps = _ceil_log2(fabric.gpus_per_node)
    one = fabric.msg_us + fabric.scaleup_us + float(fabric.peer_time_us(s))
    if reduce:
        one += float(fabric.reduce_time_us(s))
    return steps * one


def han(n: int, nodes: int, fabric: Fabric, *, after_rest: bool = False) -> Prediction:
    """Open MPI 5's ``coll/han`` all-reduce (``mca_coll_han_allreduce_intra``, the
    default: not "simple").

    The buffer is cut into :data:`HAN_SEGMENT_BYTES` segments; each goes through four
    sub-collectives: an intra-node reduce to local rank 0 (tuned), an inter-node reduce
    among the node leaders (libnbc ``ireduce``), an inter-node broadcast among them
    (libnbc ``ibcast``) and an intra-node broadcast (tuned). They are pipelined: in
    iteration i a leader runs the intra-node reduce of segment i and broadcast of
    segment i - 3 (blocking, one after the other) while the non-blocking inter-node
    reduce of segment i - 1 and broadcast of segment i - 2 progress (their latencies
    overlap; on the leader's NIC what they send adds up, what they receive adds up, and
    the two directions run side by side). An iteration lasts the longer of the two
    sides; there are segments + 3 iterations. The first segment meets the token buckets
    as the timed loop's previous call left them (:func:`_paid`): the root's NIC as its
    broadcast left it, the buckets on its way in (its switch port, the other leaders'
    NICs) as its reduce did, each refilled since; HAN's pipeline keeps them busy, so
    later segments find them empty. ``after_rest``: the first call after a rest instead
    (every bucket full). The inter-node sub-collectives run among the node leaders
    alone, the other ranks waiting, so their messages pay the latency of that many ranks
    exchanging (:meth:`Fabric.nic_us_among`).
    """
    _check(n, nodes, fabric)
    g = fabric.gpus_per_node
    p = nodes * g
    leaders = fabric.with_(nic_us=fabric.nic_us_among(nodes, p))
    m = max(1, math.ceil(n / HAN_SEGMENT_BYTES))
    seg = np.full(m, float(min(n, HAN_SEGMENT_BYTES)))
    seg[-1] = n - (m - 1) * seg[0]
    memo: dict = {}

    def cost(kind: str, i: int, first: tuple[float, float]) -> tuple:
        """A sub-collective of segment i; ``first``: the buckets at the call's start (the
        root's NIC, those on its way in). The first segment's reduce starts from them,
        its broadcast from what the reduce left of the root's; later segments find the
        buckets empty."""
        s = float(seg[i])
        tokens = (0.0, 0.0)
        if i == 0 and kind == "ur":
            tokens = first
        elif i == 0 and kind == "ub":
            tokens = (cost("ur", 0, first)[4], 0.0)
        key = (kind, s, tokens)
        if key not in memo:
            if kind == "lr":
                memo[key] = ("", _intra_tree(s, fabric, reduce=True), 0.0, 0.0, 0.0)
            elif kind == "lb":
                memo[key] = ("", _intra_tree(s, fabric, reduce=False), 0.0, 0.0, 0.0)
            elif kind == "ur":
                memo[key] = _inter_reduce(s, nodes, leaders, *tokens)
            else:
                memo[key] = _inter_bcast(s, nodes, leaders, tokens[0])
        return memo[key]

    def at(i: int) -> bool:
        return 0 <= i < m

    def one_call(first: tuple[float, float]) -> tuple[float, float, float, float]:
        """The call's time, the root's tokens its last broadcast left, the inbound
        tokens its last reduce left and how long before the call's end that was."""
        total = since_reduce = 0.0
        for it in range(m + 3):
            intra = sum(cost(k, i, first)[1] for k, i in (("lr", it), ("lb", it - 3)) if at(i))
            inter = [cost(k, i, first) for k, i in (("ur", it - 1), ("ub", it - 2)) if at(i)]
            inter_us = max((c[1] for c in inter), default=0.0) + max(
                sum(c[2] for c in inter), sum(c[3] for c in inter)
            )
            span = max(intra, inter_us)
            total += span
            since_reduce = 0.0 if it == m else since_reduce + span
        return total, cost("ub", m - 1, first)[4], cost("ur", m - 1, first)[5], since_reduce

    # a call of the timed loop: the root's bucket refilled over its last intra-node
    # broadcast and the barrier, the inbound ones over everything after the last reduce
    # and the barrier (:func:`_repeated`)
    depth = float(fabric.nic_burst_bytes)
    gap = _barrier_us(fabric, nodes)
    idle = cost("lb", m - 1, (depth, depth))[1] + gap

    def step(first):
        total, left, in_left, since = one_call((float(first[0]), float(first[1])))
        refilled = (fabric.drain_bucket(left, idle, 0.0)[1],
                    fabric.drain_bucket(in_left, since + gap, 0.0)[1])  # fmt: skip
        return total, np.array(refilled, dtype=float)

    if depth <= 0:
        total = one_call((0.0, 0.0))[0]
    elif after_rest:
        total = one_call((depth, depth))[0]
    else:
        total = _steady_tokens(step, np.array([depth, depth]))
    ur_alg = cost("ur", 0, (depth, depth))[0]
    ub_alg = cost("ub", 0, (depth, depth))[0]
    info = {
        "algo": f"han({ur_alg}, {ub_alg} bcast)",
        "han_segments": m,
        "han_inter_reduce": f"libnbc {ur_alg}",
        "han_inter_bcast": f"libnbc {ub_alg}",
        "han_intra": "tuned binomial reduce/bcast",
        "han_inter_latency_us": leaders.nic_us,
    }
    t = np.full(p, fabric.stage_us + total)
    return Prediction("han", t, lower_bound_us(n, nodes, fabric), info)


def _check(n: int, nodes: int, fabric: Fabric) -> None:
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"all-reduce size must be a whole number of bytes >= 0 (got {n!r})")
    if isinstance(nodes, bool) or int(nodes) != nodes or nodes < 1:
        raise ValueError(f"node count must be an integer >= 1 (got {nodes!r})")


def lower_bound_us(n: int, nodes: int, fabric: Fabric) -> float:
    """No all-reduce beats this: each node (each GPU, on one node) must move 2((N-1)/N)n.

    Between nodes the data leaves through g NICs and needs ⌈log2 N⌉ latencies to reach
    every node; on one node each GPU has one scale-up port.
    """
    g = fabric.gpus_per_node
    if nodes > 1:
        bw = float(fabric.nic_time_us(2 * (nodes - 1) / nodes * n / g))
        return max(bw, math.ceil(math.log2(nodes)) * fabric.nic_us)
    if g == 1:
        return 0.0
    return max(float(fabric.scaleup_time_us(2 * (g - 1) / g * n)), fabric.scaleup_us)


def _link(
    fabric: Fabric,
    cross: np.ndarray,
    nbytes: float,
    post_us: float,
    nic_share: float = 1.0,
    concurrent: int = 1,
    exchange: float | None = None,
    free: np.ndarray | float = 0.0,
    two_sided: bool = True,
    cross_us: float | None = None,
    up_us: float | None = None,
) -> np.ndarray:
    """Latency plus transfer time of one message of ``nbytes`` per pair.

    ``post_us``: what posting the message costs (host or proxy); ``nic_share``: the
    fraction of the NIC's bandwidth the message's protocol gets for its payload;
    ``concurrent``: messages of this size crossing the switch at the same time (they
    share the fabric's ``fabric_GBps``); ``exchange``: the pair sends both ways at once,
    each direction at most this many GB/s of wire bytes (None: not an exchange);
    ``free``: wire bytes the NIC's token bucket passes at once (``Fabric.drain_bucket``);
    ``two_sided``: a send the receiver matches, whose eager limit spares a small one the
    tail (:meth:`Fabric.wire_time_us`); a one-sided put (False) keeps it; ``cross_us``:
    the fixed cost of a message between nodes (None: ``post_us`` and a latency);
    ``up_us``: that inside a node (None: ``post_us`` and the scale-up latency).
    """
    paid = np.maximum(nbytes / nic_share - free, 0.0)
    message = nbytes / nic_share if two_sided else None
    wire = fabric.wire_time_us(paid, concurrent, message_bytes=message)
    if exchange is not None:
        wire = np.maximum(wire, fabric.exchange_time_us(paid, exchange))
    fixed = post_us + fabric.nic_us if cross_us is None else cross_us
    up = post_us + fabric.scaleup_us if up_us is None else up_us
    return np.where(cross, fixed + wire, up + fabric.peer_time_us(nbytes))


def _barrier_us(fabric: Fabric, nodes: int) -> float:
    """The harness's barrier between two timed calls, as a NIC idles through it: a
    latency per round, ⌈log2 N⌉ rounds across nodes and ⌈log2 g⌉ inside one. On the
    emulated 8x1 ``python -m commbench.benchmarks.bucket_state`` measured a rank's end of
    a call to its next start (the slowest rank's end and the barrier) 263-463 us,
    median 364; this gives 3 x 82 = 246 plus the wait for the call's end."""
    return _ceil_log2(nodes) * fabric.nic_us + _ceil_log2(fabric.gpus_per_node) * fabric.scaleup_us


#: most calls of the timed loop run before the modelled one (:func:`_repeated`): the
#: buckets' level stops moving within a few on the emulated cluster (8 at 3 KiB on 8x1),
#: but a call that drains them by a few bytes each time walks down linearly (a bucket
#: of 15 KB at 4 B a call: some 4000 calls)
_LOOP_CALLS = 4096


def _steady_tokens(step, tokens: np.ndarray):
    """Run ``step(tokens) -> (result, next call's tokens)`` from ``tokens`` until the
    tokens stop moving (a thousandth of a byte) or :data:`_LOOP_CALLS` calls; the last
    result."""
    for _ in range(_LOOP_CALLS):
        result, following = step(tokens)
        if np.allclose(following, tokens, rtol=0.0, atol=1e-3):
            break
        tokens = following
    return result


def _repeated(
    fabric: Fabric, nodes: int, one_call, lead_us: float = 0.0, after_rest: bool = False
) -> np.ndarray:
    """Finish times of a call that follows calls like itself, each after a barrier (the
    harness's timed loop): ``one_call(tokens)`` runs one call from its NICs' token
    buckets (None: full) and returns ``(finish times, tokens left, when each NIC's last
    bytes left)``. The next call finds each bucket as the previous call left it,
    refilled from its NIC's last bytes to the call's end, through the barrier and over
    ``lead_us`` (what the call does before its first step); calls are run until that
    level stops moving. On the emulated 8x1 a 4 KiB all-reduce took 389 us after calls
    that leave the buckets full and 991 us after calls like itself (``python -m
    commbench.benchmarks.bucket_state``). Without a bucket the one call is the answer;
    ``after_rest``: the loop's first call, every bucket full."""
    gap = _barrier_us(fabric, nodes) + lead_us

    def step(tokens):
        t, left, sent = one_call(tokens)
        return t, fabric.drain_bucket(left, t.max() - sent + gap, 0.0)[1]

    if fabric.nic_burst_bytes <= 0:
        return one_call(None)[0]
    t, following = step(None)
    if after_rest or not np.any(following < fabric.nic_burst_bytes):
        return t
    return _steady_tokens(step, following)


def _pairwise(
    fabric: Fabric,
    node_of: np.ndarray,
    start: np.ndarray,
    *args,
    after_rest: bool = False,
    **kwargs,
) -> np.ndarray:
    """:func:`_butterfly` as a call of the timed loop (:func:`_repeated`)."""
    nodes = int(np.unique(node_of).size)
    lead = float(np.min(start)) if np.size(start) else 0.0
    return _repeated(fabric, nodes, lambda tokens: _butterfly(fabric, node_of, start, *args,
                                                              tokens=tokens, **kwargs),
                     lead, after_rest)  # fmt: skip


def _butterfly(
    fabric: Fabric,
    node_of: np.ndarray,
    start: np.ndarray,
    steps: list[tuple[int, float, float]],
    fold: tuple[float, float],
    post_us: float | None = None,
    nic_share: float = 1.0,
    width: int = 1,
    one_sided: bool = False,
    tokens: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finish times of a butterfly over ``len(node_of)`` participants, with each
    participant NIC's tokens left and when its last bytes left.

    ``steps`` holds ``(bit, wire, reduce)``: participant i exchanges ``wire`` bytes with
    i XOR 2^bit (both ways at once: at most ``exchange_GBps`` each way across nodes),
    then reduces ``reduce`` bytes. Participants beyond the largest power of
    two fold in first (``fold = (wire, reduce)``) and get ``fold[0]`` bytes back at the end.
    ``post_us``: cost of posting one message (default ``msg_us``, two-sided host sends);
    ``nic_share``: see :func:`_link`; ``width``: ranks each participant stands for
    (each sending its own message at once, as NVRAR's GPUs of one node do);
    ``one_sided``: the exchanges are puts (``put_exchange_GBps`` where measured).
    A two-sided host step between nodes costs ``butterfly_step_us`` and its wire time
    where that is calibrated (the slope of calibrate's chains of empty exchanges with
    mutual partners; the call pays how late its ranks come once, :func:`_butterfly_start`),
    otherwise an empty round's (:func:`_two_sided_step_us`) and a latency: that round's
    partners shift, so it waits on a chain of ranks where a butterfly's pair waits on
    itself, and its cost holds the ranks' lateness at every step (on the emulated 8x1
    139-152 us a round against 86-109 a butterfly step).
    Each participant's NIC keeps its token bucket (``nic_burst_bytes``) from step to
    step, ``tokens`` at the start (None: full) and refilled while no bytes of its own
    cross.
    """
    exchange = fabric.exchange_GBps
    if one_sided and math.isfinite(fabric.put_exchange_GBps):
        exchange = fabric.put_exchange_GBps
    post = _two_sided_step_us(fabric) if post_us is None else post_us
    step_us = fabric.butterfly_step_us if post_us is None and not one_sided else None
    before_wire = post + fabric.nic_us if step_us is None else step_us
    m = node_of.size
    t = np.asarray(start, dtype=np.float64).copy()
    if tokens is None:  # full: nothing left the NICs for long
        tokens, sent = np.full(m, float(fabric.nic_burst_bytes)), np.full(m, -np.inf)
    else:  # what the NICs hold at the call's start, refilled from there
        tokens, sent = np.asarray(tokens, dtype=np.float64).copy(), t.copy()

    def link(a, b, wire: float, exchange_rate: float | None) -> np.ndarray:
        """Cost of a's message to b (both ways when ``exchange_rate``), from both ready."""
        cross = node_of[a] != node_of[b]
        ready = np.maximum(t[a], t[b])
        idle = ready + before_wire - np.maximum(sent[a], sent[b])
        free, left = fabric.drain_bucket(np.minimum(tokens[a], tokens[b]), idle, wire / nic_share)
        free = np.where(cross, free, 0.0)
        cost = _link(fabric, cross, wire, post, nic_share, width * int(cross.sum()),
                     exchange=exchange_rate, free=free, two_sided=not one_sided,
                     cross_us=step_us)  # fmt: skip
        for x in (a, b):
            tokens[x] = np.where(cross, left, tokens[x])
            sent[x] = np.where(cross, ready + cost, sent[x])
        return cost

    p2 = 1 << (m.bit_length() - 1)
    hi = np.arange(p2, m)
    lo = hi - p2
    if hi.size:
        wire, red = fold
        arrive = t[hi] + link(hi, lo, wire, None)
        t[lo] = np.maximum(t[lo], arrive) + fabric.reduce_time_us(red)
        t[hi] = arrive
    i = np.arange(p2)
    for bit, wire, red in steps:
        j = i ^ (1 << bit)
        cost = link(i, j, wire, exchange)
        t[:p2] = np.maximum(t[i], t[j]) + cost + fabric.reduce_time_us(red)
    if hi.size:
        back = link(lo, hi, fold[0], None)
        t[hi] = np.maximum(t[hi], t[lo]) + back
        t[lo] = t[lo] + back
    return t, tokens, sent


def _two_sided_step_us(fabric: Fabric) -> float:
    """Fixed cost of one step of a host-driven algorithm (each rank posts a receive and a
    send, then waits): one grouped call, as :func:`~commbench.kernels.model.fabric.step_finish`
    charges it (``stage_us`` and ``msg_us`` per posted message). On the emulated cluster
    calibrate's ``stage`` point (an empty exchange round, all ranks at once) is this plus
    one latency."""
    return fabric.stage_us + 2 * fabric.msg_us


def _butterfly_start(fabric: Fabric, p: int, nodes: int) -> np.ndarray:
    """When a host-driven butterfly's ranks start its first step: ``butterfly_call_us``
    (how late they come to a call, calibrated with the step) where it crosses nodes."""
    late = fabric.butterfly_call_us if nodes > 1 and fabric.butterfly_step_us is not None else 0.0
    return np.full(p, float(late))


def _log2_floor(m: int) -> int:
    return m.bit_length() - 1


def recursive_doubling(
    n: int, nodes: int, fabric: Fabric, *, after_rest: bool = False
) -> Prediction:
    """Flat recursive doubling over all P ranks."""
    _check(n, nodes, fabric)
    p = nodes * fabric.gpus_per_node
    node_of = np.arange(p) // fabric.gpus_per_node
    steps = [(k, n, n) for k in range(_log2_floor(p))]
    t = _pairwise(fabric, node_of, _butterfly_start(fabric, p, nodes), steps, fold=(n, n),
                  after_rest=after_rest)  # fmt: skip
    return Prediction(
        "recursive-doubling", t, lower_bound_us(n, nodes, fabric), {"steps": len(steps)}
    )


def rabenseifner(
    n: int, nodes: int, fabric: Fabric, *, nearest_first: bool = False, after_rest: bool = False
) -> Prediction:
    """Recursive-halving reduce-scatter, recursive-doubling all-gather (flat).

    Halving step i moves n / 2^(i+1) bytes; which partner gets which step decides what
    crosses the NICs when a node holds several ranks. ``nearest_first=False`` is this
    suite's ``rabenseifner`` (:mod:`commbench.kernels.baselines.rabenseifner`): the
    farthest partner (r XOR P/2) gets the first half, so on 4 x 2 the two largest steps
    cross nodes. ``True`` is Open MPI tuned's ``redscat_allgather`` (distance doubling
    from r XOR 1, the nearest partner getting the half: inside the node on 4 x 2).
    """
    _check(n, nodes, fabric)
    p = nodes * fabric.gpus_per_node
    node_of = np.arange(p) // fabric.gpus_per_node
    k = _log2_floor(p)
    bits = list(range(k)) if nearest_first else list(range(k - 1, -1, -1))
    rs = [(bits[i], n / 2 ** (i + 1), n / 2 ** (i + 1)) for i in range(k)]
    ag = [(bits[k - 1 - i], n / 2 ** (k - i), 0.0) for i in range(k)]
    t = _pairwise(fabric, node_of, _butterfly_start(fabric, p, nodes), rs + ag, fold=(n, n),
                  after_rest=after_rest)  # fmt: skip
    info = {"steps": 2 * k, "order": "nearest first" if nearest_first else "farthest first"}
    return Prediction("rabenseifner", t, lower_bound_us(n, nodes, fabric), info)


def ring(n: int, nodes: int, fabric: Fabric, *, after_rest: bool = False) -> Prediction:
    """Flat ring: 2(P-1) steps of n/P, each rank sending to its right neighbour and
    receiving from its left (then reducing what came, in the first P-1).

    Each rank's steps are chained on its own, as the implementation posts them (no
    barrier between steps): a step ends when the left neighbour's message has arrived
    and the rank's own send is done, which is at once for a message within the link's
    eager limit (``nic_eager_bytes`` / ``scaleup_eager_bytes``; the message leaves when
    its sender starts the step) and otherwise when the right neighbour has it (the
    transfer starts once the receiver has posted too). With every link alike this is the
    textbook 2(P-1)(α + βn/P) + γn(P-1)/P; where links differ (several ranks of a node
    behind its NIC) a small message's delay moves around the ring instead of every step
    paying the slowest link. Each sending NIC keeps its token bucket from step to step,
    and a call finds it as the timed loop's previous call left it (:func:`_repeated`).
    Where calibrate measured a ring step (``ring_step_us``: calls of steps of a small message
    around the ring) a step's fixed cost on every link is that, and a call starts
    ``ring_call_us`` late; otherwise an empty round's posts and the link's latency.
    """
    _check(n, nodes, fabric)
    g = fabric.gpus_per_node
    p = nodes * g
    lb = lower_bound_us(n, nodes, fabric)
    if p == 1:
        return Prediction("ring", np.full(1, fabric.stage_us), lb, {"steps": 0})
    rank = np.arange(p)
    node_of = rank // g
    left, right = (rank - 1) % p, (rank + 1) % p
    cross = node_of[left] != node_of  # the link into each rank
    chunk = n / p
    eager = chunk <= np.where(cross, fabric.nic_eager_bytes, fabric.scaleup_eager_bytes)
    post = _two_sided_step_us(fabric)
    hop = fabric.ring_step_us  # None: post and the link's latency
    reduce_us = fabric.reduce_time_us(chunk)

    def one_call(tokens: np.ndarray | None) -> tuple:
        t = np.full(p, fabric.ring_call_us if hop is not None else 0.0)
        if tokens is None:  # each sender's NIC full; when its last bytes left
            tokens, sent = np.full(p, float(fabric.nic_burst_bytes)), np.full(p, -np.inf)
        else:  # what they hold at the call's start, refilled from there
            tokens, sent = tokens.copy(), np.zeros(p)
        for step in range(2 * (p - 1)):
            start = np.where(eager, t[left], np.maximum(t[left], t))
            idle = start + (post + fabric.nic_us if hop is None else hop) - sent[left]
            free, kept = fabric.drain_bucket(tokens[left], idle, chunk)
            arrive = start + _link(fabric, cross, chunk, post, concurrent=nodes,
                                   free=np.where(cross, free, 0.0), cross_us=hop,
                                   up_us=hop)  # fmt: skip
            tokens[left] = np.where(cross, kept, tokens[left])
            sent[left] = np.where(cross, arrive, sent[left])
            # an eager send is done once posted: the post is in the measured hop, if any
            done = np.where(eager[right], t + (post if hop is None else 0.0), arrive[right])
            t = np.maximum(done, arrive) + (reduce_us if step < p - 1 else 0.0)
        return t, tokens, sent

    t = _repeated(fabric, nodes, one_call, after_rest=after_rest)
    return Prediction("ring", t, lb, {"steps": 2 * (p - 1)})


def _intra_collective_us(n: int, fabric: Fabric, reduce: bool) -> float:
    """Intra-node reduce-scatter (``reduce``) or all-gather of an n-byte buffer.

    The faster of a ring (g - 1 steps of n/g to one peer) and a direct exchange (n/g to
    every peer at once, limited by the GPU's port and by each peer link).
    """
    g = fabric.gpus_per_node
    if g == 1:
        return 0.0
    chunk = n / g
    ring_us = (g - 1) * (fabric.scaleup_us + fabric.peer_time_us(chunk))
    direct_us = fabric.scaleup_us + max(
        fabric.scaleup_time_us((g - 1) * chunk), fabric.peer_time_us(chunk)
    )
    t = min(ring_us, direct_us)
    if reduce:
        t += fabric.reduce_time_us((g - 1) * chunk)
    return float(t)


def nvrar(
    n: int, nodes: int, fabric: Fabric, *, ll8: bool = True, after_rest: bool = False
) -> Prediction:
    """Intra-node reduce-scatter, inter-node recursive doubling on n/g, intra all-gather.

    Each inter-node step is one put per partner through the NVSHMEM transport
    (``put_us``: a CPU proxy with libfabric, ~0 with IBGDA); with ``ll8`` its payload
    moves at the LL8 share of the NIC (``fabric.ll8_share``; on GPUs NCCL's LL ring
    efficiency, :data:`commbench.kernels.model.nccl.LL_RING_EFFICIENCY`:
    half the wire is flags, and 8-byte stores do not reach line rate).
    """
    _check(n, nodes, fabric)
    g = fabric.gpus_per_node
    phases = 3 if g > 1 else 1
    chunk = n / g
    share = fabric.ll8_share if ll8 else 1.0
    rs = _intra_collective_us(n, fabric, reduce=True)
    node_ids = np.arange(nodes)
    inter_steps = [(k, chunk, chunk) for k in range(_log2_floor(nodes))]
    start = np.full(nodes, phases * fabric.stage_us + rs)
    t_nodes = _pairwise(fabric, node_ids, start, inter_steps, (chunk, chunk), fabric.put_us, share,
                        width=g, one_sided=True, after_rest=after_rest)  # fmt: skip
    ag = _intra_collective_us(n, fabric, reduce=False)
    t = np.repeat(t_nodes + ag, g)
    info = {
        "phases": phases,
        "inter_steps": len(inter_steps) + (2 if nodes & (nodes - 1) else 0),
        "intra_rs_us": rs,
        "intra_ag_us": ag,
        "ll8": ll8,
    }
    return Prediction("nvrar", t, lower_bound_us(n, nodes, fabric), info)


def nccl(n: int, nodes: int, fabric: Fabric) -> Prediction:
    """NCCL: its own pick among tree/ring x LL/LL128/Simple (:mod:`commbench.kernels.model.nccl`),
    run on the channels a call of this size gets (its bandwidth term scaled by the share
    of channels and threads used), plus the host proxy: every network step of a chunk
    passes the sender's and the receiver's proxy thread (``2 * proxy_us``) and returns a
    credit (one ``nic_us``).

    Bus bandwidth: a node's NICs together across nodes (each GPU drives its own), capped
    by the scale-up port; on one node the scale-up port.
    """
    _check(n, nodes, fabric)
    g = fabric.gpus_per_node
    p = nodes * g
    if p == 1:
        return Prediction("nccl", np.zeros(1), 0.0, {"algo": "none", "proto": "none"})
    if nodes > 1:
        bus = min(g * fabric.nic_GBps, fabric.scaleup_GBps if g > 1 else math.inf)
    else:
        bus = fabric.scaleup_GBps
    algo, proto, est = nccl_table.choose(n, nodes, g, bus, fabric.nccl_ll128)
    hops = nccl_table.network_steps(nodes, algo)
    proxy = hops * (2 * fabric.proxy_us + fabric.nic_us) if fabric.proxy_us else 0.0
    share = nccl_table.channels_used(n, p, nccl_table.channels(g), algo, proto)
    lat, full_bw = nccl_table.estimate_terms(n, nodes, g, bus, algo, proto)  # all channels
    t = lat + full_bw / share + proxy
    info = {
        "algo": algo,
        "proto": proto,
        "nccl_estimate_us": est[f"{algo}/{proto}"],
        "channel_share": share,
        "proxy_us": proxy,
        "network_steps": hops,
        "estimates_us": est,
    }
    return Prediction("nccl", np.full(p, t), lower_bound_us(n, nodes, fabric), info)


def predict(
    algorithm: str, n: int, nodes: int, fabric: Fabric, *, after_rest: bool = False
) -> Prediction:
    """Dispatch by name (see :data:`ALGORITHMS`). A call of the harness's timed loop,
    which finds the NICs' token buckets as the previous call left them; ``after_rest``:
    the first call after a rest instead, every bucket full (the same where the fabric
    has none, and for NCCL, whose model keeps none)."""
    table = {
        "nvrar": nvrar,
        "ring": ring,
        "recursive-doubling": recursive_doubling,
        "rabenseifner": rabenseifner,
        "nccl": nccl,
        "mpi": mpi,
    }
    if algorithm not in table:
        raise ValueError(
            f"no all-reduce model named {algorithm!r}: choose from {', '.join(ALGORITHMS)}"
        )
    if algorithm == "nccl":
        return nccl(n, nodes, fabric)
    return table[algorithm](n, nodes, fabric, after_rest=after_rest)
