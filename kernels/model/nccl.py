"""NCCL's own all-reduce cost model: algorithms, protocols and the choice between them.

NCCL picks an (algorithm, protocol) pair per call from a latency/bandwidth table it
builds at start-up (``src/graph/tuning.cc`` of NVIDIA/nccl, v2.8-era constants, read from
the public source; the table is NCCL's, not ours, and is the same on every system):

* per (algorithm, protocol) a base latency, plus a per-hop latency of the hop's hardware
  (NVLink inside a node, the network between nodes; LL hops inside a node cost 1.8x
  when the job spans nodes);
* a bus bandwidth: the channels' speed (here: a node's NICs together, or the scale-up
  port on one node), times a protocol efficiency: LL moves 8-byte cells holding 4 bytes
  of data and is charged 1/4 of it on a ring (1/3.8 on a tree), LL128 0.92 (0.915 on a
  tree), Simple all of it; trees are capped at 80 GB/s (110 on two nodes) and 0.9 of it;
* ``time = latency + bytes / algbw`` with a per-size correction for trees and a 1.9x
  latency "plateau" for multi-node Simple rings above ``P / 16 * 64 KiB``.

:func:`choose` returns every candidate's estimate and NCCL's pick (the smallest). What a
call then costs on a system adds what NCCL's table does not know:

* **channels** (``src/enqueue.cc``, ``getAlgoInfo``): NCCL runs a small call on fewer
  channels, dropping one at a time while ``bytes < channels * threads * threshold``
  (8 bytes per thread for LL and LL128 — times the rank count for a ring on LL — and 64
  for Simple; 512 threads, 640 for LL128), then halving the threads of the last one; the
  table's bandwidth assumes them all. :func:`channels_used` gives the share of the
  bandwidth a call really gets (channels x threads over the full set);
* the host proxy thread that drives every network step (:func:`network_steps`;
  ``Fabric.proxy_us``, 0 where the table's IB numbers already hold).
"""

from __future__ import annotations

import math

ALGOS = ("tree", "ring")
PROTOCOLS = ("LL", "LL128", "Simple")

#: µs, per call (tuning.cc ``baseLat``)
BASE_LAT = {"tree": (4.4, 4.4, 0.0), "ring": (3.6, 10.0, 8.4)}
#: µs per hop (tuning.cc ``hwLat``), NVLink and network
HW_LAT = {
    "nvlink": {"tree": (0.52, 1.2, 28.0), "ring": (0.47, 1.9, 3.4)},
    "net": {"tree": (5.0, 8.5, 50.0), "ring": (2.7, 4.0, 9.6)},
}
#: tree bandwidth correction by log2(bytes / 64), LL / LL128 / Simple (tuning.cc)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
)  # fmt: skip
#: the LL protocol's payload share of the ring bus bandwidth across nodes (tuning.cc)
LL_RING_EFFICIENCY = 1.0 / 4.0


#: bytes per thread before NCCL adds a channel (``NCCL_*_THREAD_THRESHOLD``, comm.h)
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
#: threads per channel (``NCCL_LL_MAX_NTHREADS``, ``NCCL_LL128_MAX_NTHREADS``,
#: ``NCCL_SIMPLE_MAX_NTHREADS``, device.h)
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}


def channels(gpus_per_node: int) -> int:
    """The channels a communicator sets up: one per NIC found by the ring search, then
    doubled (``ncclTopoPostset``); the model has one NIC per GPU."""
    return 2 * gpus_per_node


def channels_used(n: int, nranks: int, n_channels: int, algo: str, proto: str) -> float:
    """Share of the full channel set's bandwidth an ``n``-byte call gets (``getAlgoInfo``)."""
    nt = MAX_THREADS[proto]
    threshold = THREAD_THRESHOLD[proto] * (nranks if algo == "ring" and proto == "LL" else 1)
    nc = n_channels
    while n < nc * nt * threshold:
        if nc >= 2:
            nc -= 1
        elif nt % 128 == 0:
            nt //= 2
        else:
            break
    return nc * nt / (n_channels * MAX_THREADS[proto])


def _log2i(x: float) -> int:
    return int(math.floor(math.log2(x))) if x >= 1 else 0


def estimate_us(n: int, nodes: int, g: int, bus_GBps: float, algo: str, proto: str) -> float:
    """NCCL's estimate of one all-reduce of ``n`` bytes (tuning.cc's formula)."""
    return sum(estimate_terms(n, nodes, g, bus_GBps, algo, proto))


def estimate_terms(
    n: int, nodes: int, g: int, bus_GBps: float, algo: str, proto: str
) -> tuple[float, float]:
    """NCCL's estimate as ``(latency, bytes / algbw)`` in µs."""
    p_ranks = nodes * g
    pi = PROTOCOLS.index(proto)
    nsteps = 2 * (p_ranks - 1)
    inter_steps = 2 * (nodes - 1)
    bw = bus_GBps
    if algo == "ring":
        if proto == "LL":
            bw *= LL_RING_EFFICIENCY
        elif proto == "LL128":
            bw *= 0.92
        algbw = bw * p_ranks / nsteps
    else:
        max_tree = 80.0 if nodes > 2 else 110.0
        bw = min(bw * 0.9, max_tree)
        if proto == "LL":
            bw /= 3.8
        elif proto == "LL128":
            bw *= 7.0 / 9.0 if nodes == 1 else 0.915
        algbw = bw * 0.5
    intra = HW_LAT["nvlink"][algo][pi] * (1.8 if nodes > 1 and proto == "LL" else 1.0)
    inter = HW_LAT["net"][algo][pi]
    lat = BASE_LAT[algo][pi]
    if algo == "ring":
        lat += (nsteps - inter_steps) * intra + inter_steps * inter
    else:
        lat += 2 * ((g - 1) * intra + _log2i(nodes) * inter)
    if algo == "tree":
        log_size = _log2i(n >> 6) if n >= 64 else 0
        if log_size < 22:
            algbw *= TREE_CORRECTION[pi][log_size]
    elif proto == "Simple" and nodes > 1 and n >= p_ranks / 16.0 * 65536:
        lat *= 1.9
    return lat, n / (1000.0 * algbw)


def network_steps(nodes: int, algo: str) -> int:
    """Network hops one chunk takes in sequence: 2(N-1) on a ring, 2 log2 N on a tree."""
    if nodes <= 1:
        return 0
    return 2 * (nodes - 1) if algo == "ring" else 2 * math.ceil(math.log2(nodes))


def choose(n: int, nodes: int, g: int, bus_GBps: float, ll128: bool = True) -> tuple:
    """``(algo, proto, estimates)``: NCCL's pick (the smallest estimate) and every
    candidate's estimate in µs. Trees only span nodes (one node: ring only)."""
    est = {}
    for algo in ALGOS:
        if algo == "tree" and nodes == 1:
            continue
        for proto in PROTOCOLS:
            if proto == "LL128" and not ll128:
                continue
            est[f"{algo}/{proto}"] = estimate_us(n, nodes, g, bus_GBps, algo, proto)
    best = min(est, key=est.get)
    algo, proto = best.split("/")
    return algo, proto, est


# ---------------------------------------------------------------- other collectives

#: tuning.cc's rows for the collectives other than all-reduce, which NCCL runs on rings only
#: (a ring of P ranks takes ``nsteps`` steps, ``inter_steps`` of them across nodes)
COLL_STEPS = {
    "allgather": lambda p, nodes: (p - 1, nodes - 1),
    "reducescatter": lambda p, nodes: (p - 1, nodes - 1),
    "broadcast": lambda p, nodes: (p, nodes),
}
#: GB/s per channel LL128 may reach (tuning.cc ``ll128MaxBwPerCh``)
LL128_MAX_BW_PER_CHANNEL = {"broadcast": 18.8, "allgather": 18.3, "reducescatter": 15.2}


def coll_estimate_terms(
    coll: str, n: int, nodes: int, g: int, bus_GBps: float, proto: str, same_channels: bool = True
) -> tuple[float, float]:
    """NCCL's estimate of one ``coll`` call (ring) as ``(latency, bytes / algbw)`` in µs;
    ``n`` is NCCL's ``nBytes``, the whole buffer (the gathered, reduced or sent one).

    The bus bandwidth: LL moves a third of it on one node, a quarter across nodes; LL128
    0.92 of it (0.7 with one GPU per node), capped at ``LL128_MAX_BW_PER_CHANNEL`` per channel; a ring's algbw is the
    bus bandwidth times P / nsteps. The latency: all-gather and reduce-scatter pay one hop
    per step (NVLink inside a node, the network between nodes); broadcast pays one hop of
    its hardware when the ring's channels are duplicates (tuning.cc's
    ``ringGraph->sameChannels``, assumed here: the rings NCCL builds on nodes with a NIC
    per GPU), else ``nsteps`` hops (Simple at the tree's per-hop latency)."""
    p_ranks = nodes * g
    pi = PROTOCOLS.index(proto)
    nsteps, inter_steps = COLL_STEPS[coll](p_ranks, nodes)
    bw = bus_GBps
    if proto == "LL":
        bw *= 1.0 / 4.0 if nodes > 1 else 1.0 / 3.0
    elif proto == "LL128":
        bw = min(bw * (0.7 if g < 2 else 0.92), LL128_MAX_BW_PER_CHANNEL[coll] * channels(g))
    algbw = bw * p_ranks / nsteps
    intra = HW_LAT["nvlink"]["ring"][pi] * (1.8 if nodes > 1 and proto == "LL" else 1.0)
    inter = HW_LAT["net"]["ring"][pi]
    lat = BASE_LAT["ring"][pi]
    if coll == "broadcast":
        hw = "net" if nodes > 1 else "nvlink"
        hop = HW_LAT[hw]["tree" if proto == "Simple" else "ring"][pi]
        lat += HW_LAT[hw]["ring"][pi] if same_channels else nsteps * hop
    else:
        lat += (nsteps - inter_steps) * intra + inter_steps * inter
    return lat, n / (1000.0 * algbw)


def coll_choose(coll: str, n: int, nodes: int, g: int, bus_GBps: float, ll128: bool = True):
    """``(proto, estimates)``: NCCL's protocol for one ``coll`` call (always a ring) and
    every candidate's estimate in µs."""
    est = {
        f"ring/{proto}": sum(coll_estimate_terms(coll, n, nodes, g, bus_GBps, proto))
        for proto in PROTOCOLS
        if proto != "LL128" or ll128
    }
    best = min(est, key=est.get)
    return best.split("/")[1], est
