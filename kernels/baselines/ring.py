"""Ring all-reduce: reduce-scatter then all-gather around the ring, 2(P-1) steps."""

from __future__ import annotations

from commbench.kernels.baselines._allreduce import FlatAllreduce, block_bounds
from commbench.kernels.cases import AllreduceCase
from commbench.kernels.reduce import reduce_into
from commbench.kernels.registry import register


@register("allreduce", "ring")
class RingAllreduce(FlatAllreduce):
    """Ring all-reduce (textbook): P-1 reduce-scatter steps, P-1 all-gather steps."""

    def setup(self, case: AllreduceCase) -> None:
        super().setup(case)
        self.bounds = block_bounds(case.count, self.size)

    def run(self, case: AllreduceCase) -> None:
        t, xp, p, r = self.t, self.t.xp, self.size, self.rank
        acc = case.recv
        t.copy(acc, case.send)
        if p == 1:
            return
        right, left = (r + 1) % p, (r - 1) % p
        b = self.bounds
        for s in range(p - 1):  # rank r ends holding block r+1 fully reduced
            (s0, s1), (r0, r1) = b[(r - s) % p], b[(r - s - 1) % p]
            sends = [(right, acc[s0:s1])] if s1 > s0 else []
            recvs = [(left, self.tmp[: r1 - r0])] if r1 > r0 else []
            t.exchange(sends, recvs)
            if r1 > r0:
                reduce_into(xp, acc[r0:r1], acc[r0:r1], self.tmp[: r1 - r0], case.op, self.dtype)
        for s in range(p - 1):
            (s0, s1), (r0, r1) = b[(r + 1 - s) % p], b[(r - s) % p]
            sends = [(right, acc[s0:s1])] if s1 > s0 else []
            recvs = [(left, acc[r0:r1])] if r1 > r0 else []
            t.exchange(sends, recvs)

    def info(self) -> dict:
        return {"algorithm": "ring", "steps": 2 * (self.size - 1)}
