"""Flat recursive-doubling all-reduce: ceil(log2 P) full-vector exchanges (+2 folds)."""

from __future__ import annotations

from commbench.kernels.baselines._allreduce import FlatAllreduce
from commbench.kernels.cases import AllreduceCase
from commbench.kernels.doubling import doubling_steps, step_count
from commbench.kernels.reduce import reduce_into
from commbench.kernels.registry import register


@register("allreduce", "recursive-doubling")
class RecursiveDoublingAllreduce(FlatAllreduce):
    """Recursive doubling over all ranks, non-powers of two folded in and out."""

    def setup(self, case: AllreduceCase) -> None:
        super().setup(case)
        self.steps = doubling_steps(self.size, self.rank)

    def run(self, case: AllreduceCase) -> None:
        t, xp = self.t, self.t.xp
        acc = case.recv
        t.copy(acc, case.send)
        if case.count == 0:
            return
        for step in self.steps:
            sends = [(step.send_to, acc)] if step.send_to is not None else []
            if step.combine == "replace":
                t.exchange(sends, [(step.recv_from, acc)])
            elif step.combine == "reduce":
                t.exchange(sends, [(step.recv_from, self.tmp)])
                reduce_into(xp, acc, acc, self.tmp, case.op, self.dtype)
            elif sends:
                t.exchange(sends, [])

    def info(self) -> dict:
        return {"algorithm": "recursive doubling (flat)", "steps": step_count(self.size)}
