"""Modelled all-gather, reduce-scatter and broadcast on the two-tier fabric, with the
α-β-γ terms of :mod:`commbench.kernels.model.allreduce`: every message pays the latency of
the tier it crosses (``nic_us`` between nodes, ``scaleup_us`` inside one), ``msg_us`` for
being posted, and its bytes over that tier's bandwidth; a call pays ``stage_us`` once.

``n`` is nccl-tests' size: the gathered buffer (all-gather), the reduced one
(reduce-scatter), the one sent (broadcast); P = N nodes x g GPUs, rank = node * g + local.

* ``ring`` (all-gather, reduce-scatter): P - 1 steps of n/P bytes in lockstep, each as long
  as the ring's slowest link (a NIC once N > 1); reduce-scatter also reduces (P-1)/P n.
* ``recursive-doubling`` (all-gather) / ``recursive-halving`` (reduce-scatter): log2 P
  steps with partner r XOR d, d = 1, 2, ... (halving: ..., 2, 1), moving d n/P bytes;
  a step crosses the NICs when d >= g. Power-of-two P only.
* ``tree`` (broadcast, pipelined binomial): the buffer in chunks of ``chunk_bytes``; each
  of the D = ceil(log2 P) levels forwards chunk k while chunk k + 1 arrives, so the call
  takes (chunks + D - 1) chunk steps; a step lasts as long as the busiest sender's ports
  need: the root sends every chunk to its log2 N children on other nodes through its NIC
  and to its log2 g children on its node over scale-up (the tree per tier).
* ``scatter-allgather`` (broadcast): a binomial scatter (step k moves n / 2^(k+1) bytes a
  distance P / 2^(k+1): across the NICs while that is >= g) then a ring all-gather of
  n/P blocks.
* ``nccl``: NCCL's ring on its chosen protocol with the constants of ``tuning.cc``'s rows
  for these collectives (:func:`commbench.kernels.model.nccl.coll_estimate_terms`), plus
  the host proxy on every network step.

All ranks are modelled to finish together.
"""

from __future__ import annotations

import math

import numpy as np

from commbench.kernels.model import nccl as nccl_table
from commbench.kernels.model.alltoallv import Prediction
from commbench.kernels.model.fabric import Fabric

#: the algorithms modelled per collective (the implementations of the same names)
ALGORITHMS = {
    "allgather": ("ring", "recursive-doubling", "nccl"),
    "reducescatter": ("ring", "recursive-halving", "nccl"),
    "broadcast": ("tree", "scatter-allgather", "nccl"),
}
#: the tree broadcast's default chunk (:data:`commbench.kernels.baselines.broadcast.DEFAULT_CHUNK_BYTES`)
DEFAULT_CHUNK_BYTES = 256 << 10


def _check(coll: str, n: int, nodes: int) -> None:
    if coll not in ALGORITHMS:
        raise ValueError(f"no model for collective {coll!r}: choose {', '.join(ALGORITHMS)}")
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"{coll} size must be a whole number of bytes >= 0 (got {n!r})")
    if isinstance(nodes, bool) or int(nodes) != nodes or nodes < 1:
        raise ValueError(f"node count must be an integer >= 1 (got {nodes!r})")


def _hop(fabric: Fabric, cross: bool, nbytes: float, post_us: float | None = None) -> float:
    """One message: posting, the tier's latency, its bytes over the tier (a peer link)."""
    post = fabric.msg_us if post_us is None else post_us
    if cross:
        return post + fabric.nic_us + float(fabric.nic_time_us(nbytes))
    return post + fabric.scaleup_us + float(fabric.peer_time_us(nbytes))


def lower_bound_us(coll: str, n: int, nodes: int, fabric: Fabric) -> float:
    """No algorithm beats this. All-gather, reduce-scatter: a node receives (N-1)/N n
    bytes through its g NICs (one node: a GPU (g-1)/g n through its scale-up port);
    broadcast: every other node receives all n bytes through its g NICs (one node: each
    GPU n through its port), after ceil(log2 N) latencies."""
    g = fabric.gpus_per_node
    if nodes > 1:
        share = 1.0 if coll == "broadcast" else (nodes - 1) / nodes
        bw = float(fabric.nic_time_us(share * n / g))
        return max(bw, math.ceil(math.log2(nodes)) * fabric.nic_us)
    if g == 1:
        return 0.0
    share = 1.0 if coll == "broadcast" else (g - 1) / g
    return max(float(fabric.scaleup_time_us(share * n)), fabric.scaleup_us)


def ring(coll: str, n: int, nodes: int, fabric: Fabric) -> float:
    p = nodes * fabric.gpus_per_node
    if p == 1:
        return fabric.stage_us
    step = _hop(fabric, nodes > 1, n / p)
    reduce = fabric.reduce_time_us((p - 1) / p * n) if coll == "reducescatter" else 0.0
    return fabric.stage_us + (p - 1) * step + float(reduce)


def doubling(coll: str, n: int, nodes: int, fabric: Fabric) -> float:
    """Recursive doubling (all-gather) or halving (reduce-scatter); 2^k ranks."""
    g = fabric.gpus_per_node
    p = nodes * g
    if p & (p - 1):
        raise ValueError(
            f"{coll} recursive doubling/halving needs a power-of-two rank count, not {p}"
        )
    t = fabric.stage_us
    d = 1
    while d < p:
        t += _hop(fabric, d >= g, d * n / p)
        if coll == "reducescatter":
            t += float(fabric.reduce_time_us(d * n / p))
        d *= 2
    return t


def tree(n: int, nodes: int, fabric: Fabric, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> float:
    """Pipelined binomial tree broadcast (see the module's docstring)."""
    g = fabric.gpus_per_node
    p = nodes * g
    if p == 1 or n == 0:
        return fabric.stage_us
    chunks = math.ceil(n / chunk_bytes)
    c = n / chunks
    depth = (p - 1).bit_length()
    nic_children = (nodes - 1).bit_length() if nodes > 1 else 0  # root's children off node
    up_children = (g - 1).bit_length()
    post = fabric.msg_us * (nic_children + up_children + 1)
    step = post + max(
        fabric.nic_us + float(fabric.nic_time_us(nic_children * c)) if nic_children else 0.0,
        fabric.scaleup_us + float(fabric.scaleup_time_us(up_children * c)) if up_children else 0.0,
    )
    return fabric.stage_us + (chunks + depth - 1) * step


def scatter_allgather(n: int, nodes: int, fabric: Fabric) -> float:
    g = fabric.gpus_per_node
    p = nodes * g
    if p == 1:
        return fabric.stage_us
    t = fabric.stage_us
    d, share = 1 << (p - 1).bit_length(), n
    while d > 1:  # the root's half, quarter, ... of the blocks to ranks d/2 away
        d //= 2
        share /= 2
        t += _hop(fabric, d >= g, share)
    return t + ring("allgather", n, nodes, fabric) - fabric.stage_us


def nccl(coll: str, n: int, nodes: int, fabric: Fabric) -> tuple[float, dict]:
    """NCCL's ring on its protocol (tuning.cc), on the channels a call of this size gets,
    plus the host proxy on each network step (as :func:`commbench.kernels.model.allreduce.nccl`)."""
    g = fabric.gpus_per_node
    p = nodes * g
    if p == 1:
        return 0.0, {"algo": "none", "proto": "none"}
    if nodes > 1:
        bus = min(g * fabric.nic_GBps, fabric.scaleup_GBps if g > 1 else math.inf)
    else:
        bus = fabric.scaleup_GBps
    proto, est = nccl_table.coll_choose(coll, n, nodes, g, bus, fabric.nccl_ll128)
    hops = nccl_table.COLL_STEPS[coll](p, nodes)[1]
    proxy = hops * (2 * fabric.proxy_us + fabric.nic_us) if fabric.proxy_us else 0.0
    share = nccl_table.channels_used(n, p, nccl_table.channels(g), "ring", proto)
    lat, full_bw = nccl_table.coll_estimate_terms(coll, n, nodes, g, bus, proto)
    info = {
        "algo": "ring",
        "proto": proto,
        "nccl_estimate_us": est[f"ring/{proto}"],
        "channel_share": share,
        "proxy_us": proxy,
        "network_steps": hops,
        "estimates_us": est,
    }
    return lat + full_bw / share + proxy, info


def predict(
    coll: str, algorithm: str, n: int, nodes: int, fabric: Fabric, chunk_bytes: int | None = None
) -> Prediction:
    """One call of ``algorithm`` for ``coll`` (see :data:`ALGORITHMS`)."""
    _check(coll, n, nodes)
    if algorithm not in ALGORITHMS[coll]:
        raise ValueError(
            f"no {coll} model named {algorithm!r}: choose from {', '.join(ALGORITHMS[coll])}"
        )
    p = nodes * fabric.gpus_per_node
    info: dict = {}
    if algorithm == "nccl":
        t, info = nccl(coll, n, nodes, fabric)
    elif algorithm == "ring":
        t, info = ring(coll, n, nodes, fabric), {"steps": p - 1}
    elif algorithm == "tree":
        chunk = chunk_bytes or DEFAULT_CHUNK_BYTES
        t, info = tree(n, nodes, fabric, chunk), {"chunk_bytes": chunk}
    elif algorithm == "scatter-allgather":
        t = scatter_allgather(n, nodes, fabric)
    else:
        t, info = doubling(coll, n, nodes, fabric), {"steps": (p - 1).bit_length()}
    return Prediction(algorithm, np.full(p, float(t)), lower_bound_us(coll, n, nodes, fabric), info)
