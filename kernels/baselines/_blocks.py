"""Shared pieces of the textbook all-gather, reduce-scatter and broadcast algorithms
(ring, recursive doubling / halving, binomial tree, scatter + all-gather): the common
set-up and a ring all-gather over any block layout. Written against the transport
interface only (:mod:`commbench.kernels.transport`), so they run on every backend; a
block is a range of elements of one 1-D buffer, moved as bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from commbench.kernels.cases import BlockCase

Bounds = list[tuple[int, int]]


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


class BlockAlgorithm:
    """Base: one world-group algorithm; subclasses say which ``--param`` keys they take."""

    PARAMS: tuple[str, ...] = ()
    #: the algorithm runs on power-of-two rank counts only (the registry's ``pow2_ranks``)
    POW2 = False

    def __init__(self, transport: Any, params: dict | None = None) -> None:
        unknown = sorted(set(params or {}) - set(self.PARAMS))
        if unknown:
            raise ValueError(f"{type(self).__name__} takes no parameter {unknown[0]!r}")
        self.t = transport
        self.rank = transport.topo.rank
        self.size = transport.topo.size
        self.params = dict(params or {})
        if self.POW2 and not is_pow2(self.size):
            raise ValueError(
                f"{type(self).__name__} needs a power-of-two number of ranks, not {self.size}"
            )
        self._scratch_key: tuple | None = None

    def scratch(self, count: int, dtype: Any, n: int = 1) -> list:
        """``n`` scratch buffers of ``count`` elements, made again only when they change."""
        key = (count, dtype, n)
        if key != self._scratch_key:
            self._scratch_key = key
            self._scratch = [self.t.empty(count, dtype) for _ in range(n)]
        return self._scratch

    def setup(self, case: BlockCase) -> None:
        """Nothing to prepare beyond what ``run`` makes on its first call."""


def equal_bounds(count: int, parts: int) -> Bounds:
    """``parts`` blocks of ``count`` elements each, back to back."""
    return [(i * count, (i + 1) * count) for i in range(parts)]


def ring_allgather(
    t: Any, buf: Any, bounds: Bounds, me: int, world: Callable[[int], int] = int
) -> None:
    """Ring all-gather in place over ``len(bounds)`` participants: participant ``me``
    holds block ``me`` of ``buf``; after P - 1 steps (at step s it passes block me - s to
    its right and gets block me - s - 1 from its left) everyone holds every block.
    ``world`` maps a participant to its world rank. Empty blocks are not sent."""
    p = len(bounds)
    right, left = world((me + 1) % p), world((me - 1) % p)
    for s in range(p - 1):
        s0, s1 = bounds[(me - s) % p]
        r0, r1 = bounds[(me - s - 1) % p]
        t.exchange(
            [(right, buf[s0:s1])] if s1 > s0 else [],
            [(left, buf[r0:r1])] if r1 > r0 else [],
        )
