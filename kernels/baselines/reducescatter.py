"""Reduce-scatter over the transport: a ring (P - 1 steps of one block, reducing as the
partial sums go round) and recursive halving (log2 P steps, each half the bytes of the
one before; power-of-two rank counts only). Rank r ends with block r reduced over all
ranks, MPI_Reduce_scatter_block's layout."""

from __future__ import annotations

import numpy as np

from commbench.kernels.baselines._blocks import BlockAlgorithm
from commbench.kernels.cases import BlockCase
from commbench.kernels.reduce import check_op, reduce_into
from commbench.kernels.registry import register


class _ReduceScatter(BlockAlgorithm):
    def setup(self, case: BlockCase) -> None:
        check_op(case.op)
        self.dtype = np.dtype(case.dtype)

    def _only_rank(self, case: BlockCase) -> bool:
        """One rank or empty blocks: nothing to exchange (the block is the input)."""
        if self.size > 1 and case.count:
            return False
        if not case.inplace and case.count:
            self.t.copy(case.recv, case.send[self.rank * case.count :][: case.count])
        return True


@register("reducescatter", "ring")
class RingReduceScatter(_ReduceScatter):
    """Ring reduce-scatter (textbook): P - 1 steps; the partial sum of one block moves right."""

    def run(self, case: BlockCase) -> None:
        if self._only_rank(case):
            return
        t, p, r, c = self.t, self.size, self.rank, case.count
        acc, tmp = self.scratch(c, case.send.dtype, 2)
        right, left = (r + 1) % p, (r - 1) % p
        send = case.send

        def block(b: int):
            return send[b * c : (b + 1) * c]

        t.copy(acc, block((r - 1) % p))
        for s in range(p - 1):  # rank r reduces block r - s - 2 at step s, its own last
            t.exchange([(right, acc)], [(left, tmp)])
            last = s == p - 2
            out = case.recv if last else tmp
            reduce_into(t.xp, out, tmp, block((r - s - 2) % p), case.op, self.dtype)
            acc, tmp = tmp, acc

    def info(self) -> dict:
        return {"algorithm": "ring", "steps": self.size - 1}


@register("reducescatter", "recursive-halving", pow2_ranks=True)
class RecursiveHalvingReduceScatter(_ReduceScatter):
    """Recursive halving: at each step send the half of the window this rank does not keep
    to rank XOR d, reduce the half it keeps (2^k ranks)."""

    POW2 = True

    def run(self, case: BlockCase) -> None:
        if self._only_rank(case):
            return
        t, p, r, c = self.t, self.size, self.rank, case.count
        half = p // 2 * c
        acc, tmp = self.scratch(half, case.send.dtype, 2)
        src, lo, hi = case.send, 0, p  # window [lo, hi) of blocks, its first block at src[0]
        d = p // 2
        while d >= 1:
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if r & d == 0 else ((mid, hi), (lo, mid))
            k0, g0 = (keep[0] - lo) * c, (give[0] - lo) * c
            n = d * c
            t.exchange([(r ^ d, src[g0 : g0 + n])], [(r ^ d, tmp[:n])])
            out = case.recv if d == 1 else acc[:n]  # the kept window moves to acc's front
            reduce_into(t.xp, out, src[k0 : k0 + n], tmp[:n], case.op, self.dtype)
            src, (lo, hi) = acc, keep
            d //= 2

    def info(self) -> dict:
        return {"algorithm": "recursive halving", "steps": self.size.bit_length() - 1}
