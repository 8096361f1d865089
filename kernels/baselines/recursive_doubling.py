"""Flat recursive-doubling all-reduce: ceil(log2 P) full-vector exchanges (+2 folds)."""

from __future__ import annotations

from commbench.kernels.baselines._allreduce import FlatAllreduce
from commbench.kernels.cases import AllreduceCase
from commbench.kernels.doubling import doubling_steps, step_count
from commbench.kernels.registry import register


@register("allreduce", "recursive-doubling")
class RecursiveDoublingAllreduce(FlatAllreduce):
    """Recursive doubling over all ranks, non-powers of two folded in and out."""

    def steps(self, case: AllreduceCase) -> list:
        acc, tmp, steps = case.recv, self.tmp, []
        for step in doubling_steps(self.size, self.rank):
            sends = [(step.send_to, acc)] if step.send_to is not None else []
            if step.combine == "replace":
                steps.append((sends, [(step.recv_from, acc)], None))
            elif step.combine == "reduce":
                steps.append((sends, [(step.recv_from, tmp)], (acc, tmp)))
            elif sends:
                steps.append((sends, [], None))
        return steps

    def info(self) -> dict:
        return {"algorithm": "recursive doubling (flat)", "steps": step_count(self.size)}
