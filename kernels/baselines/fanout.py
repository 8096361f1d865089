"""Fan-out all-to-all(v): every send and receive posted at once.

This is what NCCL/RCCL all-to-allv does (one group of send/recv); on ``cpu`` it is one
batch of MPI Isend/Irecv. Zero-byte pairs are skipped on both sides (every rank knows the
traffic matrix, so both agree).
"""

from __future__ import annotations

import numpy as np

from commbench.kernels import timeline
from commbench.kernels.cases import AlltoallvCase
from commbench.kernels.registry import register
from commbench.kernels.transport import bind_posts


def fanout_plan(traffic: np.ndarray, rank: int) -> tuple[list, list]:
    """``(sends, recvs)`` as (peer, offset, nbytes) triples for ``rank``, peers ascending."""
    row, col = traffic[rank, :], traffic[:, rank]
    soff = np.concatenate(([0], np.cumsum(row)[:-1]))
    roff = np.concatenate(([0], np.cumsum(col)[:-1]))
    sends = [(int(p), int(soff[p]), int(row[p])) for p in np.flatnonzero(row)]
    recvs = [(int(p), int(roff[p]), int(col[p])) for p in np.flatnonzero(col)]
    return sends, recvs


@register("alltoall", "fanout")
@register("alltoallv", "fanout")
class Fanout:
    """All sends and receives at once (NCCL/RCCL grouped send/recv; MPI Isend/Irecv)."""

    def __init__(self, transport, params: dict) -> None:
        self.transport = transport

    def setup(self, case: AlltoallvCase) -> None:
        sends, recvs = fanout_plan(case.traffic, case.rank)
        self._posts = bind_posts(
            self.transport,
            [(p, case.send[o : o + n]) for p, o, n in sends],
            [(p, case.recv[o : o + n]) for p, o, n in recvs],
        )

    def run(self, case: AlltoallvCase) -> None:
        tl = timeline.active()
        if tl:
            timeline.run_posts(self._posts, tl, 0)
        else:
            self._posts.run()
