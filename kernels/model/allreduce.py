"""Modelled all-reduce: NVRAR (hierarchical), ring, recursive doubling, Rabenseifner, NCCL-like.

``n`` is the buffer size in bytes, P = N nodes x g GPUs, rank = node * g + local index.
Each call pays ``stage_us`` once per launched phase; every message pays the latency of the
tier it crosses (``nic_us`` between nodes, ``scaleup_us`` inside one) plus its bytes over
that tier's bandwidth; a reduction of ``m`` bytes costs ``m / reduce_GBps``. A message
posted by the host (two-sided MPI send/recv, or a network step NCCL's proxy thread hands
to the NIC) also pays ``msg_us``; NVRAR's inter-node puts are issued by the GPU into
flag-carrying cells and do not. These are the α-β-γ models of ``nvrar.md``:

* ``ring`` (flat, one ring over all P ranks): 2(P-1) steps of n/P bytes on the slowest
  link of the ring (a NIC once N > 1): 2(P-1)α + 2((P-1)/P)nβ + ((P-1)/P)nγ.
* ``recursive-doubling`` (flat): at step k rank r exchanges n bytes with r XOR 2^k and
  adds them; a step crosses the NICs when a pair spans two nodes. A non-power-of-two
  count first folds the extra ranks into a power-of-two subset and returns the result to
  them at the end (one extra step each way).
* ``rabenseifner`` (flat): reduce-scatter by recursive halving (step k exchanges
  n / 2^(k+1) with r XOR 2^k, nearest partner first) and all-gather by recursive doubling
  back; same fold for non-powers of two.
* ``nvrar``: intra-node reduce-scatter (the faster of a ring and a direct exchange to all
  peers at once), recursive doubling on n/g bytes between same-index GPUs of different nodes — on LL8 cells, so twice
  the bytes on the wire — then the intra-node all-gather. Three launched phases (one when
  g = 1, where it is plain recursive doubling between nodes).
* ``nccl``: what NCCL picks, the faster of a ring and a tree, each run over g channels so
  every NIC carries 1/g of the data: ring 2(P-1) hops of latency and 2((P-1)/P)n bytes per
  GPU; tree (intra-node chain, double binary tree between nodes) 2((g-1) scale-up +
  ⌈log2 N⌉ NIC) hops of latency and 2n bytes per node each way. Network hops go through
  the proxy (``msg_us``); NVLink hops do not.

All ranks finish together except where a fold makes some wait longer.
"""

from __future__ import annotations

import math

import numpy as np

from kernels.model.alltoallv import Prediction
from kernels.model.fabric import Fabric

ALGORITHMS = ("nvrar", "ring", "recursive-doubling", "rabenseifner", "nccl")


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


def _link(fabric: Fabric, cross: np.ndarray, nbytes: float, host: bool = True) -> np.ndarray:
    """Latency plus transfer time of one message of ``nbytes`` per pair."""
    posted = fabric.msg_us if host else 0.0
    return posted + np.where(
        cross,
        fabric.nic_us + fabric.nic_time_us(nbytes),
        fabric.scaleup_us + fabric.peer_time_us(nbytes),
    )


def _pairwise(
    fabric: Fabric,
    node_of: np.ndarray,
    start: np.ndarray,
    steps: list[tuple[int, float, float]],
    fold: tuple[float, float],
    host: bool = True,
) -> np.ndarray:
    """Finish times of a butterfly over ``len(node_of)`` participants.

    ``steps`` holds ``(bit, wire, reduce)``: participant i exchanges ``wire`` bytes with
    i XOR 2^bit, then reduces ``reduce`` bytes. Participants beyond the largest power of
    two fold in first (``fold = (wire, reduce)``) and get ``fold[0]`` bytes back at the end.
    ``host``: messages are posted by the host (they pay ``msg_us``).
    """
    m = node_of.size
    t = np.asarray(start, dtype=np.float64).copy()
    p2 = 1 << (m.bit_length() - 1)
    hi = np.arange(p2, m)
    lo = hi - p2
    if hi.size:
        wire, red = fold
        arrive = t[hi] + _link(fabric, node_of[hi] != node_of[lo], wire, host)
        t[lo] = np.maximum(t[lo], arrive) + fabric.reduce_time_us(red)
        t[hi] = arrive
    i = np.arange(p2)
    for bit, wire, red in steps:
        j = i ^ (1 << bit)
        cost = _link(fabric, node_of[i] != node_of[j], wire, host)
        t[:p2] = np.maximum(t[i], t[j]) + cost + fabric.reduce_time_us(red)
    if hi.size:
        back = _link(fabric, node_of[hi] != node_of[lo], fold[0], host)
        t[hi] = np.maximum(t[hi], t[lo]) + back
        t[lo] = t[lo] + back
    return t


def _log2_floor(m: int) -> int:
    return m.bit_length() - 1


def recursive_doubling(n: int, nodes: int, fabric: Fabric) -> Prediction:
    """Flat recursive doubling over all P ranks."""
    _check(n, nodes, fabric)
    p = nodes * fabric.gpus_per_node
    node_of = np.arange(p) // fabric.gpus_per_node
    steps = [(k, n, n) for k in range(_log2_floor(p))]
    t = _pairwise(fabric, node_of, np.full(p, fabric.stage_us), steps, fold=(n, n))
    return Prediction(
        "recursive-doubling", t, lower_bound_us(n, nodes, fabric), {"steps": len(steps)}
    )


def rabenseifner(n: int, nodes: int, fabric: Fabric) -> Prediction:
    """Recursive-halving reduce-scatter, recursive-doubling all-gather (flat)."""
    _check(n, nodes, fabric)
    p = nodes * fabric.gpus_per_node
    node_of = np.arange(p) // fabric.gpus_per_node
    k = _log2_floor(p)
    rs = [(i, n / 2 ** (i + 1), n / 2 ** (i + 1)) for i in range(k)]
    ag = [(k - 1 - i, n / 2 ** (k - i), 0.0) for i in range(k)]
    t = _pairwise(fabric, node_of, np.full(p, fabric.stage_us), rs + ag, fold=(n, n))
    return Prediction("rabenseifner", t, lower_bound_us(n, nodes, fabric), {"steps": 2 * k})


def ring(n: int, nodes: int, fabric: Fabric) -> Prediction:
    """Textbook flat ring: 2(P-1) steps of n/P on the slowest link."""
    _check(n, nodes, fabric)
    g = fabric.gpus_per_node
    p = nodes * g
    if p == 1:
        t = fabric.stage_us
    else:
        cross = np.array(nodes > 1)
        step = float(_link(fabric, cross, n / p))
        t = fabric.stage_us + 2 * (p - 1) * step + fabric.reduce_time_us((p - 1) / p * n)
    return Prediction(
        "ring", np.full(p, float(t)), lower_bound_us(n, nodes, fabric), {"steps": 2 * (p - 1)}
    )


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


def nvrar(n: int, nodes: int, fabric: Fabric, *, ll8: bool = True) -> Prediction:
    """Intra-node reduce-scatter, inter-node recursive doubling on n/g, intra all-gather."""
    _check(n, nodes, fabric)
    g = fabric.gpus_per_node
    phases = 3 if g > 1 else 1
    chunk = n / g
    wire = 2 * chunk if ll8 else chunk
    rs = _intra_collective_us(n, fabric, reduce=True)
    node_ids = np.arange(nodes)
    inter_steps = [(k, wire, chunk) for k in range(_log2_floor(nodes))]
    start = np.full(nodes, phases * fabric.stage_us + rs)
    t_nodes = _pairwise(fabric, node_ids, start, inter_steps, fold=(wire, chunk), host=False)
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
    """NCCL-like: the faster of a g-channel ring and a g-channel tree."""
    _check(n, nodes, fabric)
    g = fabric.gpus_per_node
    p = nodes * g
    inter = nodes > 1
    hop = fabric.nic_us + fabric.msg_us if inter else fabric.scaleup_us
    ring_lat = 2 * (p - 1) * hop
    # per byte of the ring's 2((P-1)/P)n: each GPU is the node's exit on 1 of its g rings
    # (that share goes through its NIC); the rest of its traffic goes over its scale-up port
    ring_bw = max(
        float(fabric.nic_time_us(1.0)) / g if inter else 0.0,
        float(fabric.scaleup_time_us(1.0)) * ((g - 1) / g if inter else 1.0) if g > 1 else 0.0,
    )
    ring_t = ring_lat + 2 * (p - 1) / p * n * ring_bw + fabric.reduce_time_us((p - 1) / p * n)
    depth = math.ceil(math.log2(nodes)) if inter else 0
    tree_lat = 2 * ((g - 1) * fabric.scaleup_us + depth * (fabric.nic_us + fabric.msg_us))
    tree_bw = max(
        2 * float(fabric.nic_time_us(1.0)) / g if inter else 0.0,
        2 * float(fabric.scaleup_time_us(1.0)) if g > 1 else 0.0,
    )
    tree_t = tree_lat + n * tree_bw + fabric.reduce_time_us(n)
    if p == 1:
        algo, t = "none", 0.0
    elif ring_t <= tree_t or not inter:
        algo, t = "ring", ring_t
    else:
        algo, t = "tree", tree_t
    info = {"algo": algo, "ring_us": fabric.stage_us + ring_t, "tree_us": fabric.stage_us + tree_t}
    return Prediction(
        "nccl", np.full(p, fabric.stage_us + t), lower_bound_us(n, nodes, fabric), info
    )


def predict(algorithm: str, n: int, nodes: int, fabric: Fabric) -> Prediction:
    """Dispatch by name (see :data:`ALGORITHMS`)."""
    table = {
        "nvrar": nvrar,
        "ring": ring,
        "recursive-doubling": recursive_doubling,
        "rabenseifner": rabenseifner,
        "nccl": nccl,
    }
    if algorithm not in table:
        raise ValueError(
            f"no all-reduce model named {algorithm!r}: choose from {', '.join(ALGORITHMS)}"
        )
    return table[algorithm](n, nodes, fabric)
