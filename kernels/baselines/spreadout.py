"""Spread-out all-to-all(v): a shifted round-robin of P - 1 exchanges.

At step k = 1 .. P - 1 rank r sends to ``(r + k) mod P`` and receives from
``(r - k) mod P``; its own block is a local copy. Each step is one posted pair (one
NCCL/RCCL group on GPUs) waited on before the next, so every receiver has exactly one
sender per step. Steps where this rank neither sends nor receives are skipped (every
rank knows the traffic matrix, so both sides agree).
"""

from __future__ import annotations

import numpy as np

from commbench.kernels import timeline
from commbench.kernels.cases import AlltoallvCase, exclusive_cumsum
from commbench.kernels.registry import register
from commbench.kernels.transport import bind_copy, bind_posts


def spreadout_plan(traffic: np.ndarray, rank: int) -> tuple[tuple, list]:
    """``(self copy, steps)`` for ``rank``: the copy is ``(send offset, recv offset,
    nbytes)``; each step is ``(k, send, recv)`` with ``send``/``recv`` a ``(peer, offset,
    nbytes)`` triple or None when empty. Steps with neither are left out."""
    d = np.asarray(traffic, dtype=np.int64)
    p = d.shape[0]
    soff, roff = exclusive_cumsum(d[rank, :]), exclusive_cumsum(d[:, rank])
    own = (int(soff[rank]), int(roff[rank]), int(d[rank, rank]))
    steps = []
    for k in range(1, p):
        to, frm = (rank + k) % p, (rank - k) % p
        send = (to, int(soff[to]), int(d[rank, to])) if d[rank, to] else None
        recv = (frm, int(roff[frm]), int(d[frm, rank])) if d[frm, rank] else None
        if send or recv:
            steps.append((k, send, recv))
    return own, steps


@register("alltoallv", "spreadout")
class Spreadout:
    """Shifted round-robin: step k sends to rank r + k and receives from r - k (mod P)."""

    def __init__(self, transport, params: dict) -> None:
        if params:
            raise ValueError(f"spreadout takes no --param (got {', '.join(sorted(params))})")
        self.transport = transport

    def setup(self, case: AlltoallvCase) -> None:
        t = self.transport
        (so, ro, n), steps = spreadout_plan(case.traffic, case.rank)
        own = (case.recv[ro : ro + n], case.send[so : so + n])
        copy = (("copy", -1, bind_copy(t, *own)),) if n else ()
        self._steps = [
            (timeline.POSTS, k,
             bind_posts(t,
                        [(s[0], case.send[s[1] : s[1] + s[2]])] if s else [],
                        [(r[0], case.recv[r[1] : r[1] + r[2]])] if r else []))
            for k, (_, s, r) in enumerate(steps)
        ]  # fmt: skip
        self._work = (*copy, *self._steps)  # (kind, step, call or Plan): what --timeline records
        self._calls = timeline.traced_calls(self._work)

    def run(self, case: AlltoallvCase) -> None:
        tl = timeline.active()
        if tl:
            timeline.run_traced(self._work, tl)
            return
        for call in self._calls:  # the own block's copy, then the steps (bound in setup)
            call()

    def info(self) -> dict:
        return {"steps": len(self._steps)}
