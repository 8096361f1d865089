"""NVRAR's schedule helpers: block padding and the timeout message. The recursive-doubling
schedule itself (with its global step numbers, which index NVRAR's receive regions and
credit slots) is :mod:`commbench.kernels.doubling`, shared with the flat baselines.
"""

from __future__ import annotations

from commbench.kernels.doubling import Step


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
