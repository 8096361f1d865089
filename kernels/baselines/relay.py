"""Rail-aligned fan-outs through a relay GPU: PXN-like and DeepEP-like all-to-allv.

Both send every byte bound for another server over exactly one rail (NIC i of a server
only talks to NIC i of the others) and move it over scale-up on one side:

* ``pxn`` (NCCL's PXN, "proxy across NVLink"): GPU (s, i) first hands the bytes for GPU
  (t, j) to its own server's GPU (s, j), which sends them over rail j to (t, j).
* ``deepep`` (DeepEP-like dispatch): GPU (s, i) sends the bytes for (t, j) over its own
  rail i to (t, i), which forwards them over scale-up to (t, j).

Intra-server bytes go straight to their destination in the first step. Each hop is one
grouped exchange (one NCCL group on GPUs; MPI Isend/Irecv on ``cpu``); a relay stages
what passes through it in a scratch buffer laid out so the second hop sends and receives
contiguous blocks where the receive buffer's order allows. Rank = server * G + local
index; every rank knows the traffic matrix, so all agree on every message size.
"""

from __future__ import annotations

import numpy as np

from commbench.kernels import timeline
from commbench.kernels.cases import AlltoallvCase, exclusive_cumsum
from commbench.kernels.registry import register
from commbench.kernels.transport import bind_copy, bind_posts


def relay_plan(traffic: np.ndarray, gpus_per_node: int, rank: int, at_sender: bool) -> dict:
    """Byte moves of ``rank`` as ``(peer rank, offset, nbytes)`` lists, by hop.

    ``hop1_send``/``hop1_recv`` and ``hop2_send``/``hop2_recv`` name offsets in the send
    buffer (``"send"``), the receive buffer (``"recv"``) or the relay scratch
    (``"scratch"``): each entry is ``(peer, where, offset, nbytes)``. ``scratch_bytes`` is
    the scratch size; ``copies`` (before hop 1) and ``copies_after`` (after hop 2) are
    local ``(where_dst, dst_off, where_src, src_off, nbytes)`` moves: the self block, and
    the bytes a GPU relays for itself.
    """
    d = np.asarray(traffic, dtype=np.int64)
    p, g = d.shape[0], gpus_per_node
    s, i = divmod(rank, g)
    soff_all = np.array([exclusive_cumsum(d[r, :]) for r in range(p)])
    roff_all = np.array([exclusive_cumsum(d[:, r]) for r in range(p)])
    servers = p // g
    keys = ("hop1_send", "hop1_recv", "hop2_send", "hop2_recv", "copies", "copies_after")
    plan: dict = {k: [] for k in keys}
    # intra-server traffic: direct, in hop 1
    for j in range(g):
        peer = s * g + j
        if peer != rank and d[rank, peer]:
            plan["hop1_send"].append((peer, "send", int(soff_all[rank, peer]), int(d[rank, peer])))
        if peer != rank and d[peer, rank]:
            plan["hop1_recv"].append((peer, "recv", int(roff_all[rank, peer]), int(d[peer, rank])))
    if d[rank, rank]:
        plan["copies"].append(("recv", int(roff_all[rank, rank]), "send",
                               int(soff_all[rank, rank]), int(d[rank, rank])))  # fmt: skip
    remote = [t for t in range(servers) if t != s]
    scratch = 0
    if at_sender:
        # relay (s, i) stages, for each remote server t, the blocks of (s, 0..G-1) -> (t, i)
        # in source order: one contiguous block per t, which lands contiguously at (t, i)
        slot = {}
        for t in remote:
            for a in range(g):
                slot[(t, a)] = scratch
                scratch += int(d[s * g + a, t * g + i])
        for t in remote:
            for j in range(g):  # my bytes for (t, j) go to relay (s, j)
                dst, n = t * g + j, int(d[rank, t * g + j])
                if not n:
                    continue
                if j == i:
                    plan["copies"].append(("scratch", slot[(t, i)], "send",
                                           int(soff_all[rank, dst]), n))  # fmt: skip
                else:
                    plan["hop1_send"].append((s * g + j, "send", int(soff_all[rank, dst]), n))
            for a in range(g):  # (s, a)'s bytes for (t, i) come to me
                n = int(d[s * g + a, t * g + i])
                if n and a != i:
                    plan["hop1_recv"].append((s * g + a, "scratch", slot[(t, a)], n))
        for t in remote:
            n = sum(int(d[s * g + a, t * g + i]) for a in range(g))
            if n:
                plan["hop2_send"].append((t * g + i, "scratch", slot[(t, 0)], n))
            n = sum(int(d[t * g + a, rank]) for a in range(g))
            if n:  # (t, i) relays all of server t's bytes for me: contiguous in recv
                plan["hop2_recv"].append((t * g + i, "recv", int(roff_all[rank, t * g]), n))
    else:
        # I receive over rail i, from (t, i), the bytes of (t, i) for (s, 0..G-1), staged
        # by destination; then forward each destination's block over scale-up
        slot = {}
        for t in remote:
            for j in range(g):
                slot[(t, j)] = scratch
                scratch += int(d[t * g + i, s * g + j])
        for t in remote:
            n = int(d[rank, t * g : (t + 1) * g].sum())
            if n:  # my bytes for (t, 0..G-1) are contiguous in my send buffer
                plan["hop1_send"].append((t * g + i, "send", int(soff_all[rank, t * g]), n))
            n = int(d[t * g + i, s * g : (s + 1) * g].sum())
            if n:
                plan["hop1_recv"].append((t * g + i, "scratch", slot[(t, 0)], n))
        for t in remote:
            src = t * g + i
            for j in range(g):  # forward (t, i)'s block for (s, j)
                n = int(d[src, s * g + j])
                if not n:
                    continue
                if j == i:
                    plan["copies_after"].append(("recv", int(roff_all[rank, src]), "scratch",
                                                 slot[(t, j)], n))  # fmt: skip
                else:
                    plan["hop2_send"].append((s * g + j, "scratch", slot[(t, j)], n))
            for a in range(g):  # (t, a)'s block for me comes from my peer (s, a)
                n = int(d[t * g + a, rank])
                if n and a != i:
                    plan["hop2_recv"].append((s * g + a, "recv", int(roff_all[rank, t * g + a]), n))
    plan["scratch_bytes"] = scratch
    return plan


class _Relay:
    """Two grouped hops through a relay GPU (see the module docstring)."""

    at_sender: bool

    def __init__(self, transport, params: dict) -> None:
        if params:
            raise ValueError(f"{self.name} takes no --param (got {', '.join(sorted(params))})")
        self.transport = transport

    def setup(self, case: AlltoallvCase) -> None:
        t = self.transport
        g = t.topo.gpus_per_node
        plan = relay_plan(case.traffic, g, case.rank, self.at_sender)
        self._scratch = t.empty(max(plan["scratch_bytes"], 1), np.uint8)
        bufs = {"send": case.send, "recv": case.recv, "scratch": self._scratch}

        def view(where: str, off: int, n: int):
            return bufs[where][off : off + n]

        def msgs(key: str) -> list:
            return [(peer, view(w, o, n)) for peer, w, o, n in plan[key]]

        def moves(key: str, step: int) -> list:
            return [("copy", step, bind_copy(t, view(wd, od, n), view(ws, os_, n)))
                    for wd, od, ws, os_, n in plan[key]]  # fmt: skip

        self._work = (  # (kind, step, call or Plan): what --timeline records
            *moves("copies", 0),
            (timeline.POSTS, 0, bind_posts(t, msgs("hop1_send"), msgs("hop1_recv"))),
            (timeline.POSTS, 1, bind_posts(t, msgs("hop2_send"), msgs("hop2_recv"))),
            *moves("copies_after", 1),
        )
        self._calls = timeline.traced_calls(self._work)
        self._info = {"steps": 2, "scratch_bytes": plan["scratch_bytes"]}

    def run(self, case: AlltoallvCase) -> None:
        tl = timeline.active()
        if tl:
            timeline.run_traced(self._work, tl)
            return
        for call in self._calls:  # copies, hop 1, hop 2, copies after (bound in setup)
            call()

    def info(self) -> dict:
        return dict(self._info)


@register("alltoallv", "pxn")
class Pxn(_Relay):
    """PXN-like fan-out: over scale-up to the destination's rail, then over that rail."""

    name = "pxn"
    at_sender = True


@register("alltoallv", "deepep")
class DeepEP(_Relay):
    """DeepEP-like dispatch: over the sender's own rail, then forwarded over scale-up."""

    name = "deepep"
    at_sender = False
