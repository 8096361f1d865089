"""Recursive-doubling schedule with non-power-of-two folding (pure, shared by all paths).

N participants (nodes for NVRAR's inter-node step, ranks for the flat baseline). With
p2 the largest power of two <= N and r = N - p2 "extra" participants:

* step ``fold-in`` (only when r > 0): extra participant p2 + i sends its vector to i,
  which adds it to its own (i < r);
* ``log2 p2`` ``exchange`` steps: participant i < p2 swaps its partial sum with
  i XOR 2^k and adds the partner's;
* step ``fold-out`` (only when r > 0): i < r sends the result back to p2 + i.

Steps are numbered globally (the same numbers on every participant): the number indexes
the receive region and the credit slot of the one-sided implementation, so a region is
only ever written by one sender.
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


def padded_count(count: int, parts: int) -> int:
    """``count`` rounded up to a multiple of ``parts`` (block reduce-scatter needs equal blocks)."""
    if count < 0 or parts < 1:
        raise ValueError(f"bad count {count} or part count {parts}")
    return -(-count // parts) * parts


class NvrarTimeout(RuntimeError):
    """A receiver waited past ``timeout_s`` for a partner (data or credit)."""


def timeout_message(
    *,
    rank: int,
    step: Step,
    partner_rank: int,
    partner_node: int,
    waiting_for: str,
    seq: int,
    timeout_s: float,
) -> str:
    return (
        f"nvrar: rank {rank} waited {timeout_s:g} s in inter-node step {step.index} "
        f"({step.kind}) for {waiting_for} from partner rank {partner_rank} "
        f"(node {partner_node}), call {seq}: did every rank enter the all-reduce? "
        f"(raise --param timeout_s=SECONDS on an oversubscribed machine)"
    )
