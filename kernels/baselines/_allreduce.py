"""Shared pieces of the textbook all-reduce baselines (ring, recursive doubling,
Rabenseifner): block partitioning and the common set-up. Written against the transport
interface only, so they run on every backend; reductions are :mod:`commbench.kernels.reduce`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from commbench.kernels import timeline
from commbench.kernels.cases import AllreduceCase
from commbench.kernels.reduce import bind_reduce, check_op
from commbench.kernels.transport import bind_copy, bind_posts

#: One step: its sends and receives (peer, array view), then ``acc_part = acc_part op
#: scratch_part`` when the step reduces what it received (``(acc_part, scratch_part)``).
Step = tuple[list, list, tuple[Any, Any] | None]


def block_bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``[start, end)`` element ranges covering ``count`` elements.

    The first ``count % parts`` blocks get one element more (numpy's array_split rule);
    blocks are empty when ``count < parts``.
    """
    if parts < 1 or count < 0:
        raise ValueError(f"cannot split {count} elements into {parts} blocks")
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def span(bounds: list[tuple[int, int]], lo: int, hi: int) -> tuple[int, int]:
    """Element range of blocks ``lo .. hi-1``."""
    return bounds[lo][0], bounds[hi - 1][1]


class FlatAllreduce:
    """Base: world-group algorithm with a scratch buffer of the message size.

    A subclass lists its steps for a case (:meth:`steps`, views of ``case.recv`` - the
    accumulator - and the scratch buffer); :meth:`setup` binds each step's posts once
    (persistent requests on ``cpu``), its reduction and the copy of the input into the
    accumulator, and :meth:`run` calls them in order: a call does no per-step Python
    beyond them."""

    def __init__(self, transport: Any, params: dict | None = None) -> None:
        if params:
            raise ValueError(
                f"{type(self).__name__} takes no parameters (got {', '.join(sorted(params))})"
            )
        self.t = transport
        self.rank = transport.topo.rank
        self.size = transport.topo.size
        self._key: tuple | None = None

    def setup(self, case: AllreduceCase) -> None:
        check_op(case.op)
        key = (case.count, case.send.dtype)
        if key != self._key:
            self._key = key
            self.tmp = self.t.empty(case.count, case.send.dtype)
        self.dtype = dtype = np.dtype(case.dtype)
        work = [("copy", -1, bind_copy(self.t, case.recv, case.send))]
        for k, (sends, recvs, reduce) in enumerate(self.steps(case) if case.count else []):
            work.append((timeline.POSTS, k, bind_posts(self.t, sends, recvs)))
            if reduce is not None:
                acc, got = reduce
                work.append(("reduce", k, bind_reduce(self.t.xp, acc, acc, got, case.op, dtype)))
        self._work = tuple(work)  # (kind, step, call or Plan): what --timeline records
        self._calls = timeline.traced_calls(work)

    def steps(self, case: AllreduceCase) -> list[Step]:
        """This rank's steps for ``case`` (the algorithm, as a value)."""
        raise NotImplementedError

    def run(self, case: AllreduceCase) -> None:
        tl = timeline.active()
        if tl:
            timeline.run_traced(self._work, tl)
            return
        for call in self._calls:  # bound in setup for this case
            call()
