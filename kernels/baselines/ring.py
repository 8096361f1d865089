"""Ring all-reduce: reduce-scatter then all-gather around the ring, 2(P-1) steps."""

from __future__ import annotations

from commbench.kernels.baselines._allreduce import FlatAllreduce, block_bounds
from commbench.kernels.cases import AllreduceCase
from commbench.kernels.registry import register


@register("allreduce", "ring")
class RingAllreduce(FlatAllreduce):
    """Ring all-reduce (textbook): P-1 reduce-scatter steps, P-1 all-gather steps."""

    def steps(self, case: AllreduceCase) -> list:
        p, r, acc, tmp = self.size, self.rank, case.recv, self.tmp
        if p == 1:
            return []
        right, left = (r + 1) % p, (r - 1) % p
        b = block_bounds(case.count, p)
        steps = []
        for s in range(p - 1):  # rank r ends holding block r+1 fully reduced
            (s0, s1), (r0, r1) = b[(r - s) % p], b[(r - s - 1) % p]
            sends = [(right, acc[s0:s1])] if s1 > s0 else []
            recvs = [(left, tmp[: r1 - r0])] if r1 > r0 else []
            steps.append((sends, recvs, (acc[r0:r1], tmp[: r1 - r0]) if r1 > r0 else None))
        for s in range(p - 1):
            (s0, s1), (r0, r1) = b[(r + 1 - s) % p], b[(r - s) % p]
            sends = [(right, acc[s0:s1])] if s1 > s0 else []
            recvs = [(left, acc[r0:r1])] if r1 > r0 else []
            steps.append((sends, recvs, None))
        return steps

    def info(self) -> dict:
        return {"algorithm": "ring", "steps": 2 * (self.size - 1)}
