"""Where the bytes went: per tier, what the busiest link carried and how fast.

A two-tier cluster has one NIC per GPU between nodes and scale-up links inside a node
(NVLink, xGMI; shared memory or the emulated cluster's per-rank NICs here). From a
collective's **hop matrix** H (``H[u, v]``: bytes rank u hands directly to rank v in one
call) and the rank-to-node map:

* NIC tier: each rank's NIC sends ``Σ_v H[u, v]`` over v on other nodes and receives
  ``Σ_u H[u, v]``; the **busiest NIC** is the largest of those;
* scale-up tier: each GPU's scale-up port sends and receives its same-node hops (the
  **busiest port**), and one pair's link carries ``H[u, v]`` (the **busiest link**);
* achieved rate per tier: the busiest one's bytes over the call's time (GB/s, 1e9), and
  its fraction of the tier's rate when the system's profile (or the emulated cluster's or
  the model's fabric) gives one;
* the time's ratio to the lower bound no algorithm beats (the cost model's
  :func:`~commbench.kernels.model.alltoallv.lower_bound` and
  :func:`~commbench.kernels.model.allreduce.lower_bound_us`, bandwidth terms only for a
  measured record).

The hop matrix is the traffic matrix routed the way the implementation routes it:
``direct`` (fan-out, spread-out, MPI, all-to-all, and any implementation whose route is not
known: each pair over its own link), ``pxn`` and ``deepep`` (two hops through a relay GPU,
as :mod:`commbench.kernels.model.alltoallv`), FAST and balance-only (the schedule's
``transfers()``: balancing, rail stages, redistribution). For all-reduce, the algorithm's
messages: ``ring``, ``recursive-doubling`` and ``rabenseifner`` as
:mod:`commbench.kernels.baselines` runs them, ``nvrar`` (intra-node reduce-scatter and
all-gather to every peer, recursive doubling of n/G along each rail), and for NCCL, RCCL,
MPI and imported tools, whose algorithm is theirs, the bandwidth-optimal ``hierarchical``
pattern (reduce-scatter and all-gather inside the node, a ring of n/G between nodes on each
rail). Bytes are payload: protocol overheads (NVRAR's flag cells, TCP headers) are not
counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files

import numpy as np

from commbench.kernels.doubling import doubling_steps, pow2_floor

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

#: record["tiers"] keys, in table order
FIELDS = (
    "routing",
    "nic_bytes",
    "nic_GBps",
    "nic_line_GBps",
    "nic_fraction",
    "scaleup_bytes",
    "scaleup_link_bytes",
    "scaleup_GBps",
    "scaleup_line_GBps",
    "scaleup_fraction",
    "cross_node_bytes",
    "lower_bound_us",
    "time_over_lb",
    "rates_from",
)
#: the record fields :func:`record_tiers` reads
RECORD_KEYS = (
    "collective", "nranks", "gpus_per_node", "impl", "size_bytes", "time_us", "system",
    "dtype", "params", "info", "fabric", "emulated_fabric",
)  # fmt: skip
TWO_HOP = ("pxn", "deepep")
SCHEDULED = ("fast", "fast+sched", "balance-only")
ALLREDUCE_ROUTES = ("ring", "recursive-doubling", "rabenseifner", "nvrar")


@dataclass(frozen=True)
class Rates:
    """Per-GPU rates of the two tiers (GB/s, payload), None where unknown, and latencies
    (µs) for the lower bound."""

    nic_GBps: float | None
    scaleup_GBps: float | None
    scaleup_peer_GBps: float | None = None
    nic_us: float = 0.0
    scaleup_us: float = 0.0
    source: str = ""

    def fabric(self, gpus_per_node: int):
        """The cost model's :class:`Fabric` of these rates (None without a NIC rate)."""
        from commbench.kernels.model.fabric import Fabric

        if not _positive(self.nic_GBps):
            return None
        up = self.scaleup_GBps if _positive(self.scaleup_GBps) else math.inf
        peer = self.scaleup_peer_GBps if _positive(self.scaleup_peer_GBps) else up
        return Fabric(
            gpus_per_node=gpus_per_node,
            nic_GBps=float(self.nic_GBps),
            nic_us=float(self.nic_us),
            scaleup_GBps=float(up),
            scaleup_peer_GBps=float(peer),
            scaleup_us=float(self.scaleup_us),
        )


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


# ------------------------------------------------------------------ hop matrices


def node_map(nranks: int, gpus_per_node: int) -> np.ndarray:
    """Rank -> node: world rank = node * G + local index (the harness's renumbering)."""
    return np.arange(nranks) // gpus_per_node


def alltoallv_hops(
    traffic: np.ndarray,
    gpus_per_node: int,
    impl: str,
    transfers=None,
    options: Mapping | None = None,
    unit: int = 1,
) -> tuple[np.ndarray, str]:
    """``(H, routing)``: the hop matrix of one all-to-all(v) call of ``impl``.

    FAST and balance-only follow ``transfers`` (their schedule's ``transfers()``), else a
    schedule made here from ``options`` (the scheduler's, as the record's params give
    them).
    """
    d = np.asarray(traffic, dtype=np.float64)
    p = d.shape[0]
    g = gpus_per_node
    base = impl.split(":")[-1]
    if base in TWO_HOP and p % g == 0 and p > g:
        return _two_hop(d, g, relay_at_sender=base == "pxn"), base
    if base in SCHEDULED and p % g == 0:
        if transfers is None:
            transfers = _schedule_transfers(traffic, g, base, options or {}, unit)
        src = np.asarray(transfers["src"], dtype=np.int64)
        dst = np.asarray(transfers["dst"], dtype=np.int64)
        nb = np.asarray(transfers["nbytes"], dtype=np.float64)
        h = np.bincount(src * p + dst, nb, p * p).reshape(p, p)
        np.fill_diagonal(h, 0.0)
        return h, "fast schedule" if base != "balance-only" else "balance-only schedule"
    h = d.copy()
    np.fill_diagonal(h, 0.0)
    return h, "direct"


def _schedule_transfers(traffic, g: int, impl: str, options: Mapping, unit: int):
    from commbench.kernels.fast import OPTIONS, schedule

    opts = {
        k: (None if str(v).lower() == "none" else v) for k, v in options.items() if k in OPTIONS
    }
    if impl == "balance-only":
        opts = {"max_stages": 0, "balance": "prologue"}
    return schedule(np.asarray(traffic, dtype=np.int64), g, unit=unit, **opts).transfers()


def _two_hop(d: np.ndarray, g: int, relay_at_sender: bool) -> np.ndarray:
    """PXN (scale-up to the destination's rail, then that rail) or DeepEP (own rail, then
    scale-up at the destination)."""
    p = d.shape[0]
    s = p // g
    blocks = d.reshape(s, g, s, g)  # [src node, src local, dst node, dst local]
    cross = ~np.eye(s, dtype=bool)[:, None, :, None]
    remote = np.where(cross, blocks, 0.0)
    h = np.where(cross, 0.0, blocks).reshape(p, p).copy()  # same-node pairs go directly
    hv = h.reshape(s, g, s, g)
    nodes, local = np.arange(s), np.arange(g)
    if relay_at_sender:  # (n,i) -> (n,j) over scale-up, then (n,j) -> (t,j)
        up = remote.sum(axis=2)  # [n, i, j]
        hv[
            nodes[:, None, None], local[None, :, None], nodes[:, None, None], local[None, None, :]
        ] += up
        net = remote.sum(axis=1)  # [n, t, j]
        hv[
            nodes[:, None, None], local[None, None, :], nodes[None, :, None], local[None, None, :]
        ] += net
    else:  # (n,i) -> (t,i) over rail i, then (t,i) -> (t,j)
        net = remote.sum(axis=3)  # [n, i, t]
        hv[
            nodes[:, None, None], local[None, :, None], nodes[None, None, :], local[None, :, None]
        ] += net
        up = remote.sum(axis=0)  # [i, t, j]
        hv[
            nodes[None, :, None], local[:, None, None], nodes[None, :, None], local[None, None, :]
        ] += up
    np.fill_diagonal(h, 0.0)
    return h


def allreduce_hops(
    nbytes: float, nranks: int, gpus_per_node: int, impl: str
) -> tuple[np.ndarray, str]:
    """``(H, routing)``: the hop matrix of one all-reduce of ``nbytes`` (see the module
    docstring for each algorithm)."""
    p, g, n = nranks, gpus_per_node, float(nbytes)
    h = np.zeros((p, p))
    if p == 1:
        return h, "none"
    base = impl.split(":")[-1]
    if base == "ring":
        h[np.arange(p), (np.arange(p) + 1) % p] = 2 * (p - 1) / p * n
        return h, "ring"
    if base == "recursive-doubling":
        _doubling(h, p, n, lambda i: i)
        return h, "recursive-doubling"
    if base == "rabenseifner":
        p2 = pow2_floor(p)
        for r in range(p2, p):  # fold in and out
            h[r, r - p2] += n
            h[r - p2, r] += n
        d = 1
        while d < p2:
            r = np.arange(p2)
            h[r, r ^ d] += 2 * n * d / p2
            d *= 2
        return h, "rabenseifner"
    if p % g:
        g = 1
    nodes = p // g
    if g > 1:  # reduce-scatter and all-gather inside each node, n/G to every peer each
        same = node_map(p, g)[:, None] == node_map(p, g)[None, :]
        h[same] += 2 * n / g
        np.fill_diagonal(h, 0.0)
    if nodes > 1:
        if base == "nvrar":
            for local in range(g):
                _doubling(h, nodes, n / g, lambda i, local=local: i * g + local)
        else:  # a ring of n/G between nodes on each rail
            i = np.arange(p)
            h[i, ((i // g + 1) % nodes) * g + i % g] += 2 * (nodes - 1) / nodes * n / g
    return h, "nvrar" if base == "nvrar" else "hierarchical"


def _doubling(h: np.ndarray, n_part: int, nbytes: float, rank_of) -> None:
    """Add recursive doubling's messages among ``n_part`` participants (with its folds)."""
    for me in range(n_part):
        for step in doubling_steps(n_part, me):
            if step.send_to is not None:
                h[rank_of(me), rank_of(step.send_to)] += nbytes


# ------------------------------------------------------------------ tiers


def tier_bytes(hops: np.ndarray, node_of: np.ndarray) -> dict:
    """Busiest NIC (bytes sent or received across nodes), busiest scale-up port and link,
    and the total bytes that crossed nodes."""
    h = np.asarray(hops, dtype=np.float64)
    node_of = np.asarray(node_of)
    cross = node_of[:, None] != node_of[None, :]
    out = np.where(cross, h, 0.0)
    up = np.where(cross, 0.0, h)
    np.fill_diagonal(up, 0.0)

    def busiest(m: np.ndarray) -> float:
        return float(max(m.sum(axis=1).max(initial=0.0), m.sum(axis=0).max(initial=0.0)))

    return {
        "nic_bytes": busiest(out),
        "scaleup_bytes": busiest(up),
        "scaleup_link_bytes": float(up.max(initial=0.0)),
        "cross_node_bytes": float(out.sum()),
    }


def summarise_tiers(
    hops: np.ndarray,
    node_of: np.ndarray,
    time_us: float,
    rates: Rates | None = None,
    lower_bound_us: float | None = None,
    routing: str = "direct",
) -> dict:
    """The record's ``tiers`` (:data:`FIELDS`): bytes, rates, fractions, ratio to the bound."""
    b = tier_bytes(hops, node_of)
    ok = _positive(time_us)

    def rate(nbytes: float) -> float | None:
        return nbytes / (time_us * 1e3) if ok else None

    def fraction(achieved: float | None, line: float | None) -> float | None:
        return achieved / line if achieved is not None and _positive(line) else None

    nic_line = rates.nic_GBps if rates and _positive(rates.nic_GBps) else None
    up_line = rates.scaleup_GBps if rates and _positive(rates.scaleup_GBps) else None
    nic_rate, up_rate = rate(b["nic_bytes"]), rate(b["scaleup_bytes"])
    lb = lower_bound_us if _positive(lower_bound_us) else None
    out = {
        "routing": routing,
        "nic_bytes": b["nic_bytes"],
        "nic_GBps": nic_rate,
        "nic_line_GBps": nic_line,
        "nic_fraction": fraction(nic_rate, nic_line),
        "scaleup_bytes": b["scaleup_bytes"],
        "scaleup_link_bytes": b["scaleup_link_bytes"],
        "scaleup_GBps": up_rate,
        "scaleup_line_GBps": up_line,
        "scaleup_fraction": fraction(up_rate, up_line),
        "cross_node_bytes": b["cross_node_bytes"],
        "lower_bound_us": lb,
        "time_over_lb": time_us / lb if lb and ok else None,
        "rates_from": rates.source if rates and (nic_line or up_line) else None,
    }
    return {k: v if k.endswith("_bytes") else _round(v) for k, v in out.items()}


def _round(v):
    """Six significant digits: what a record keeps of a rate, fraction or time."""
    return float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v


# ------------------------------------------------------------------ rates


def _profile_fabric(system: str) -> tuple[Mapping, int] | None:
    """The ``[fabric]`` table and GPUs per node of system profile ``system`` (the data
    files ``commbench jobs`` reads), or None when there is no such profile."""
    if not system or not all(c.isalnum() or c in "._-" for c in system):
        return None
    path = files("commbench.jobs.data") / "systems" / f"{system}.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fabric, devices = data.get("fabric"), data.get("devices", {})
    if not isinstance(fabric, Mapping) or not isinstance(devices.get("gpus_per_node"), int):
        return None
    return fabric, devices["gpus_per_node"]


def profile_rates(system: str, gpus_per_node: int | None = None) -> Rates | None:
    """Per-GPU tier rates from system ``system``'s profile (its NICs' rate shared by its
    GPUs, as the cost model does), or None."""
    found = _profile_fabric(system)
    if found is None:
        return None
    fabric, node_gpus = found
    try:
        nic = float(fabric["scaleout_GBps"]) * int(fabric["nics_per_node"]) / node_gpus
        up = float(fabric["scaleup_GBps"])
        peer = float(fabric.get("scaleup_peer_GBps", up))
        return Rates(
            nic,
            up or None,
            peer or None,
            float(fabric.get("scaleout_latency_us", 0.0)),
            float(fabric.get("scaleup_latency_us", 0.0)),
            f"profile {system}",
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def record_rates(rec: Mapping) -> Rates | None:
    """The tier rates a record's numbers are measured against: the model's fabric
    (modelled records), the emulated cluster's NICs (and its measured shared memory as
    scale-up), else the system's profile."""
    fab = rec.get("fabric")
    if isinstance(fab, Mapping) and _positive(fab.get("nic_GBps")):
        return Rates(
            fab["nic_GBps"],
            fab.get("scaleup_GBps"),
            fab.get("scaleup_peer_GBps"),
            float(fab.get("nic_us") or 0.0),
            float(fab.get("scaleup_us") or 0.0),
            "model fabric",
        )
    emu = rec.get("emulated_fabric")
    if isinstance(emu, Mapping) and _positive(emu.get("nic_GBps")):
        shm = emu.get("shm_GBps")
        return Rates(
            float(emu["nic_GBps"]),
            float(shm) if _positive(shm) else None,
            None,
            float(emu.get("latency_us") or 0.0),
            0.0,
            "emulated cluster NIC",
        )
    return profile_rates(str(rec.get("system") or ""), rec.get("gpus_per_node"))


# ------------------------------------------------------------------ records


def itemsize(name) -> int:
    """Bytes per element of a record's dtype name (the unit FAST's pieces align to)."""
    if name in ("bfloat16", "bf16"):
        return 2
    try:
        return np.dtype(str(name)).itemsize
    except TypeError:
        return 1


def applies(rec: Mapping) -> bool:
    """Whether a record gets tiers: all-reduce and all-to-all(v) with a known layout."""
    coll = rec.get("collective")
    p, g = rec.get("nranks"), rec.get("gpus_per_node")
    ok = isinstance(p, (int, np.integer)) and isinstance(g, (int, np.integer)) and g >= 1
    return coll in ("allreduce", "alltoall", "alltoallv") and ok and p % g == 0


def record_tiers(
    rec: Mapping,
    traffic: np.ndarray | None = None,
    transfers=None,
    rates: Rates | None = None,
) -> dict | None:
    """``tiers`` of one record (see :func:`summarise_tiers`), or None when it does not
    apply or (all-to-allv) no ``traffic`` matrix is given. All-to-all without a matrix
    is uniform: each rank sends ``size / P`` to every rank."""
    if not applies(rec):
        return None
    p, g = int(rec["nranks"]), int(rec["gpus_per_node"])
    impl, coll, size = str(rec.get("impl") or ""), rec["collective"], rec.get("size_bytes")
    time_us = rec.get("time_us")
    if not _positive(time_us) or not isinstance(size, (int, float)):
        return None
    rates = rates if rates is not None else record_rates(rec)
    fabric = rates.fabric(g) if rates else None
    if coll == "allreduce":
        hops, routing = allreduce_hops(size, p, g, impl)
        lb = None
        if fabric is not None:
            from commbench.kernels.model.allreduce import lower_bound_us

            lb = lower_bound_us(int(size), p // g, fabric)
    else:
        if traffic is None:
            if coll != "alltoall":
                return None
            traffic = np.full((p, p), int(size) // p, dtype=np.int64)
        info = rec.get("info") if isinstance(rec.get("info"), Mapping) else {}
        options = info.get("options") if isinstance(info.get("options"), Mapping) else None
        params = rec.get("params") if isinstance(rec.get("params"), Mapping) else {}
        hops, routing = alltoallv_hops(
            traffic, g, impl, transfers, options or params, itemsize(rec.get("dtype"))
        )
        lb = None
        if fabric is not None:
            from commbench.kernels.model.alltoallv import lower_bound

            lb = lower_bound(np.asarray(traffic, dtype=np.int64), fabric)["lower_bound_us"]
    return summarise_tiers(hops, node_map(p, g), float(time_us), rates, lb, routing)
