"""Rabenseifner's all-reduce: recursive-halving reduce-scatter, recursive-doubling
all-gather; non-powers of two fold the extra ranks in first and out last."""

from __future__ import annotations

from commbench.kernels.baselines._allreduce import FlatAllreduce, block_bounds, span
from commbench.kernels.cases import AllreduceCase
from commbench.kernels.doubling import pow2_floor
from commbench.kernels.registry import register


@register("allreduce", "rabenseifner")
class RabenseifnerAllreduce(FlatAllreduce):
    """Rabenseifner: reduce-scatter by recursive halving + all-gather by recursive doubling."""

    def setup(self, case: AllreduceCase) -> None:
        self.p2 = pow2_floor(self.size)
        super().setup(case)

    def steps(self, case: AllreduceCase) -> list:
        r, p2 = self.rank, self.p2
        acc, tmp = case.recv, self.tmp
        extra = self.size - p2
        if r >= p2:  # fold in, wait for the result
            return [([(r - p2, acc)], [], None), ([], [(r - p2, acc)], None)]
        steps = []
        if r < extra:
            steps.append(([], [(r + p2, tmp)], (acc, tmp)))
        b = block_bounds(case.count, p2)
        lo, hi = 0, p2
        d = p2 // 2
        while d >= 1:  # halving: keep the half of the window our bit d selects
            partner, mid = r ^ d, (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if r & d == 0 else ((mid, hi), (lo, mid))
            k0, k1 = span(b, *keep)
            g0, g1 = span(b, *give)
            steps.append((
                [(partner, acc[g0:g1])] if g1 > g0 else [],
                [(partner, tmp[: k1 - k0])] if k1 > k0 else [],
                (acc[k0:k1], tmp[: k1 - k0]) if k1 > k0 else None,
            ))  # fmt: skip
            lo, hi = keep
            d //= 2
        d = 1
        while d < p2:  # doubling: swap windows with the partner, merging them
            partner = r ^ d
            plo, phi = (lo + d, hi + d) if r & d == 0 else (lo - d, hi - d)
            m0, m1 = span(b, lo, hi)
            q0, q1 = span(b, plo, phi)
            steps.append((
                [(partner, acc[m0:m1])] if m1 > m0 else [],
                [(partner, acc[q0:q1])] if q1 > q0 else [],
                None,
            ))  # fmt: skip
            lo, hi = min(lo, plo), max(hi, phi)
            d *= 2
        if r < extra:
            steps.append(([(r + p2, acc)], [], None))
        return steps

    def info(self) -> dict:
        log = self.p2.bit_length() - 1
        folds = 2 if self.size > self.p2 else 0
        return {"algorithm": "rabenseifner", "steps": 2 * log + folds}
