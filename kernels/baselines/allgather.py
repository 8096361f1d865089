"""All-gather over the transport: a ring (P - 1 steps of one block) and recursive doubling
(log2 P steps, each twice the bytes of the one before; power-of-two rank counts only)."""

from __future__ import annotations

from commbench.kernels.baselines._blocks import BlockAlgorithm, equal_bounds, ring_allgather
from commbench.kernels.cases import BlockCase
from commbench.kernels.registry import register


class _Allgather(BlockAlgorithm):
    def _own_block(self, case: BlockCase):
        """``recv`` with this rank's block in place (copied from ``send`` out of place)."""
        c, r = case.count, self.rank
        if not case.inplace:
            self.t.copy(case.recv[r * c : (r + 1) * c], case.send)
        return case.recv


@register("allgather", "ring")
class RingAllgather(_Allgather):
    """Ring all-gather (textbook): P - 1 steps, each passing one block to the right."""

    def run(self, case: BlockCase) -> None:
        recv = self._own_block(case)
        if case.count:
            ring_allgather(self.t, recv, equal_bounds(case.count, self.size), self.rank)

    def info(self) -> dict:
        return {"algorithm": "ring", "steps": self.size - 1}


@register("allgather", "recursive-doubling", pow2_ranks=True)
class RecursiveDoublingAllgather(_Allgather):
    """Recursive doubling: at step k swap the 2^k blocks held with rank XOR 2^k (2^k ranks)."""

    POW2 = True

    def run(self, case: BlockCase) -> None:
        recv, c, r = self._own_block(case), case.count, self.rank
        if not c:
            return
        d = 1
        while d < self.size:
            mine = r & ~(d - 1)  # first block of the window this rank holds
            theirs = mine ^ d
            partner = r ^ d
            self.t.exchange(
                [(partner, recv[mine * c : (mine + d) * c])],
                [(partner, recv[theirs * c : (theirs + d) * c])],
            )
            d *= 2

    def info(self) -> dict:
        return {"algorithm": "recursive doubling", "steps": self.size.bit_length() - 1}
