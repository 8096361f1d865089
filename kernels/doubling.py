"""Recursive-doubling schedule with non-power-of-two folding (pure, shared by NVRAR's
inter-node step and the flat recursive-doubling / Rabenseifner baselines).

N participants. With p2 the largest power of two <= N and r = N - p2 "extra"
participants: ``fold-in`` (only when r > 0: p2 + i sends its vector to i, which adds
it), ``log2 p2`` ``exchange`` steps (i < p2 swaps its partial sum with i XOR 2^k and
adds the partner's), ``fold-out`` (only when r > 0: i < r sends the result back to
p2 + i). Steps are numbered globally, the same on every participant.
"""

from __future__ import annotations

from dataclasses import dataclass

FOLD_IN = "fold-in"
EXCHANGE = "exchange"
FOLD_OUT = "fold-out"


@dataclass(frozen=True)
class Step:
    """What one participant does in one global step (``None``: no send / no receive)."""

    index: int
    kind: str
    send_to: int | None
    recv_from: int | None
    combine: str | None  # "reduce" (acc op= received) | "replace" (acc = received)


def pow2_floor(n: int) -> int:
    if n < 1:
        raise ValueError(f"need at least one participant, got {n}")
    return 1 << (n.bit_length() - 1)


def step_count(n: int) -> int:
    """Number of global steps for ``n`` participants."""
    p2 = pow2_floor(n)
    return p2.bit_length() - 1 + (2 if n > p2 else 0)


def doubling_steps(n: int, me: int) -> list[Step]:
    """All global steps of the schedule as seen by participant ``me`` of ``n``."""
    if not 0 <= me < n:
        raise ValueError(f"participant {me} out of range for {n} participants")
    p2 = pow2_floor(n)
    extra = n - p2
    steps: list[Step] = []
    if extra:
        if me >= p2:
            steps.append(Step(0, FOLD_IN, me - p2, None, None))
        elif me < extra:
            steps.append(Step(0, FOLD_IN, None, me + p2, "reduce"))
        else:
            steps.append(Step(0, FOLD_IN, None, None, None))
    for k in range(p2.bit_length() - 1):
        idx = len(steps)
        if me < p2:
            partner = me ^ (1 << k)
            steps.append(Step(idx, EXCHANGE, partner, partner, "reduce"))
        else:
            steps.append(Step(idx, EXCHANGE, None, None, None))
    if extra:
        idx = len(steps)
        if me < extra:
            steps.append(Step(idx, FOLD_OUT, me + p2, None, None))
        elif me >= p2:
            steps.append(Step(idx, FOLD_OUT, None, me - p2, "replace"))
        else:
            steps.append(Step(idx, FOLD_OUT, None, None, None))
    return steps
