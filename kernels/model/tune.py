"""Model-driven choice of FAST scheduler options: build a few candidate schedules, keep the
one the cost model says is fastest.

The scheduler's own stage-count rule (``stage_cost_bytes``, ``tail_penalty``) is a
per-NIC byte count; it cannot see lending ahead, redistribution behind or the tail's
stragglers, which the model runs step by step. Synthesis costs ~2 ms at 320 GPUs, the
``transfers()`` table and the model ~0.1 s together, so a handful of candidates per call
is affordable. :func:`tune_fast` always evaluates the default options first and keeps
them on ties, so the result is never slower (in the model) than the default.

A second round moves the fan-out tail (``tail=``, see :mod:`kernels.fast.scheduler`):
the :data:`TAIL_ROUND_BEST` fastest option sets of the first round are tried again with
the tail posted alongside each stage of :data:`TAIL_STAGES` instead of after the last one.
A third round splits the first stage (``first_stage_fraction=``, each of
:data:`FIRST_STAGE_FRACTIONS`) on the :data:`TAIL_ROUND_BEST` fastest option sets so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernels.model.alltoallv import Prediction, fast
from kernels.model.fabric import Fabric

#: ``max_stage_bytes`` candidates, as multiples of the fabric's per-stage cost in bytes
STAGE_CAP_MULTIPLES = (16, 32, 64)
#: ``tail_penalty`` candidates (the scheduler's default is 2)
TAIL_PENALTIES = (2.0, 1.5, 1.25)
#: ``tail`` candidates of the second round (the stage the fan-out tail joins)
TAIL_STAGES = ("early", 2, 4, 8)
#: how many of the first round's fastest option sets the second round varies
TAIL_ROUND_BEST = 3
#: ``first_stage_fraction`` candidates of the third round (a small leading first stage)
FIRST_STAGE_FRACTIONS = (0.125, 0.25)


@dataclass
class Tuned:
    """The chosen candidate and the table of all of them."""

    options: dict
    schedule: object
    transfers: object
    prediction: Prediction
    default_options: dict
    default_transfers: object
    default_time_us: float
    candidates: list[dict] = field(default_factory=list)


def candidate_options(fabric: Fabric, fixed: dict | None = None) -> list[dict]:
    """Scheduler options to try, the default (``fixed`` + the fabric's stage cost) first.

    The grid varies ``max_stage_bytes`` (None or k x stage cost for k in
    :data:`STAGE_CAP_MULTIPLES`) and ``tail_penalty`` (:data:`TAIL_PENALTIES`) with
    ``quantum="auto"``; keys in ``fixed`` (the caller's explicit options) are never varied.
    Duplicates are dropped.
    """
    fixed = dict(fixed or {})
    cost = fabric.stage_cost_bytes
    default = {"stage_cost_bytes": cost, **fixed}
    cost = default["stage_cost_bytes"]
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 < cost < float("inf"):
        cost = 0  # no cap to scale (a bad value is the scheduler's to refuse)
    caps = [None] + [int(k * cost) for k in STAGE_CAP_MULTIPLES if cost and k * cost >= 1]
    out, seen = [default], {_key(default)}
    for cap in caps:
        for pen in TAIL_PENALTIES:
            cand = {"max_stage_bytes": cap, "tail_penalty": pen, "quantum": "auto"}
            cand = {**default, **cand, **fixed}
            if _key(cand) not in seen:
                seen.add(_key(cand))
                out.append(cand)
    return out


def _key(opts: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in opts.items()))


def tune_fast(
    traffic: np.ndarray,
    gpus_per_node: int,
    fabric: Fabric,
    *,
    unit: int = 1,
    fixed: dict | None = None,
    candidates: list[dict] | None = None,
) -> Tuned:
    """Schedule ``traffic`` with every candidate option set (default:
    :func:`candidate_options`), model each with :func:`kernels.model.alltoallv.fast`, and
    return the fastest (the first, i.e. the default, on ties). Without ``candidates``, a
    second round tries the tail positions :data:`TAIL_STAGES` on the first round's
    :data:`TAIL_ROUND_BEST` fastest option sets that have a tail (unless ``fixed`` sets
    ``tail``); its rows follow the first round's in ``candidates``."""
    import kernels.fast

    if gpus_per_node != fabric.gpus_per_node:
        raise ValueError(
            f"gpus_per_node={gpus_per_node} differs from the fabric's {fabric.gpus_per_node}"
        )
    cands = candidates if candidates is not None else candidate_options(fabric, fixed)
    if not cands:
        raise ValueError("tune_fast needs at least one candidate option set")
    best = None
    table: list[dict] = []
    first = None

    def run(opts: dict) -> None:
        nonlocal best, first
        sched = kernels.fast.schedule(traffic, gpus_per_node, unit=unit, **opts)
        tr = sched.transfers()
        pred = fast(traffic, tr, fabric)
        table.append(
            {
                "options": dict(opts),
                "time_us": pred.time_us,
                "time_over_lb": pred.time_over_lb,
                "stages": sched.nstages,
                "tail_bytes": sched.tail_bytes,
                "synthesis_us": sched.synthesis_seconds * 1e6,
            }
        )
        if first is None:
            first = (opts, tr, pred.time_us)
        if best is None or pred.time_us < best[3].time_us:
            best = (opts, sched, tr, pred)

    for opts in cands:
        run(opts)
    if candidates is None and "tail" not in (fixed or {}):
        with_tail = [row for row in table if row["tail_bytes"]]  # others: nothing to move
        ranked = sorted(with_tail, key=lambda row: row["time_us"])[:TAIL_ROUND_BEST]
        for row in ranked:
            for tail in TAIL_STAGES:
                run({**row["options"], "tail": tail})
    if candidates is None and "first_stage_fraction" not in (fixed or {}):
        ranked = sorted(table, key=lambda row: row["time_us"])[:TAIL_ROUND_BEST]
        for row in ranked:
            for frac in FIRST_STAGE_FRACTIONS:
                run({**row["options"], "first_stage_fraction": frac})
    opts, sched, tr, pred = best
    return Tuned(dict(opts), sched, tr, pred, dict(first[0]), first[1], first[2], table)
