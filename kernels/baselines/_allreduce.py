"""Shared pieces of the textbook all-reduce baselines (ring, recursive doubling,
Rabenseifner): block partitioning and the common set-up. Written against the transport
interface only, so they run on every backend; reductions are :mod:`commbench.kernels.reduce`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from commbench.kernels.cases import AllreduceCase
from commbench.kernels.reduce import check_op


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
    """Base: world-group algorithm with a scratch buffer of the message size."""

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
        self.dtype = np.dtype(case.dtype)
