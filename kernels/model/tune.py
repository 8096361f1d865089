"""Model-driven choice of FAST scheduler options: build a few candidate schedules, keep the
one the cost model says is fastest.

The scheduler's own stage-count rule (``stage_cost_bytes``, ``tail_penalty``) is a
per-NIC byte count; it cannot see lending ahead, redistribution behind or the tail's
stragglers, which the model runs step by step. Synthesis costs ~2 ms at 320 GPUs, the
``transfers()`` table and the model ~0.1 s together, so a few dozen candidates per call
are affordable. :func:`tune_fast` always evaluates the default options first and keeps
them on ties, so the result is never slower (in the model) than the default.

Two rounds. The first is a grid (:func:`candidate_options`): stage caps x tail
penalties, the stage count's two knobs. The second is a coordinate descent from the
first round's fastest set along :data:`AXES`, each a 2-D grid of two options that
interact: (the tail's position, the first stage's split) and again (stage cap, tail
penalty). Each axis in turn is set to each of its combinations on the fastest set so
far, until a whole pass finds nothing faster (at most :data:`MAX_PASSES` passes). The
options pay together where neither pays alone - a tail posted alongside stage 1 fills a
short leading first stage, so the lending of the rest of that stage hides behind it;
with both, larger stages pay - so a descent one option at a time stops short of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from commbench.kernels.fast.scheduler import OPTIONS
from commbench.kernels.model.alltoallv import Prediction, fast
from commbench.kernels.model.fabric import Fabric

#: ``max_stage_bytes`` candidates, as multiples of the fabric's per-stage cost in bytes
STAGE_CAP_MULTIPLES = (16, 32, 64)
#: ``tail_penalty`` candidates (the scheduler's default is 2; lower: fewer, larger stages)
TAIL_PENALTIES = (2.0, 1.5, 1.25, 1.15)
#: ``tail`` values of the descent (the stage the fan-out tail joins; "last": after all)
TAIL_STAGES = ("last", "early", 2, 4, 8)
#: ``first_stage_fraction`` values of the descent (None: no split)
FIRST_STAGE_FRACTIONS = (None, 0.125, 0.25)
#: the descent's axes in the order a pass visits them; an axis takes every combination of
#: its options' values (``max_stage_bytes``: None and :data:`STAGE_CAP_MULTIPLES` x the
#: stage cost)
AXES = (("tail", "first_stage_fraction"), ("max_stage_bytes", "tail_penalty"))
#: at most this many passes over :data:`AXES`
MAX_PASSES = 4
#: options a set leaves out when the descent sets them to the scheduler's default
_DEFAULTS = {key: OPTIONS[key] for key in ("tail", "first_stage_fraction")}


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
    passes: int = 0  # the descent's passes over its axes (0: no descent)


def default_options(fabric: Fabric, fixed: dict | None = None) -> dict:
    """The scheduler's defaults told the fabric's stage cost, with the caller's ``fixed``
    options on top: where the model starts (and all it runs untuned)."""
    return {"stage_cost_bytes": fabric.stage_cost_bytes, **(fixed or {})}


def candidate_options(fabric: Fabric, fixed: dict | None = None) -> list[dict]:
    """The first round's option sets, the default (``fixed`` + the fabric's stage cost)
    first.

    The grid varies ``max_stage_bytes`` (None or k x stage cost for k in
    :data:`STAGE_CAP_MULTIPLES`) and ``tail_penalty`` (:data:`TAIL_PENALTIES`) with
    ``quantum="auto"``; keys in ``fixed`` (the caller's explicit options) are never varied.
    Duplicates are dropped.
    """
    fixed = dict(fixed or {})
    default = default_options(fabric, fixed)
    out, seen = [default], {_key(default)}
    for cap in _caps(default):
        for pen in TAIL_PENALTIES:
            cand = {"max_stage_bytes": cap, "tail_penalty": pen, "quantum": "auto"}
            cand = {**default, **cand, **fixed}
            if _key(cand) not in seen:
                seen.add(_key(cand))
                out.append(cand)
    return out


def descent_axes(fabric: Fabric, fixed: dict | None = None) -> list[tuple[tuple, list]]:
    """The second round's axes: ``(keys, values)``, each value one entry per key, in
    :data:`AXES` order. A key ``fixed`` pins is not varied (the other key of a joint axis
    still is)."""
    fixed = dict(fixed or {})
    default = default_options(fabric, fixed)
    values = {
        "tail": TAIL_STAGES,
        "first_stage_fraction": FIRST_STAGE_FRACTIONS,
        "max_stage_bytes": _caps(default),
        "tail_penalty": TAIL_PENALTIES,
    }
    out = []
    for axis in AXES:
        keys = tuple(k for k in axis if k not in fixed)
        if keys:
            combos = [()]
            for k in keys:
                combos = [(*c, v) for v in values[k] for c in combos]
            out.append((keys, combos))
    return out


def _caps(default: dict) -> list:
    """``max_stage_bytes`` values: None and the multiples of the stage cost."""
    cost = default["stage_cost_bytes"]
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 < cost < float("inf"):
        cost = 0  # no cap to scale (a bad value is the scheduler's to refuse)
    return [None] + [int(k * cost) for k in STAGE_CAP_MULTIPLES if cost and k * cost >= 1]


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
    progress: Callable[[int, float], None] | None = None,
) -> Tuned:
    """Schedule ``traffic`` with every candidate option set (default:
    :func:`candidate_options`), model each with :func:`commbench.kernels.model.alltoallv.fast`, and
    return the fastest (the first, i.e. the default, on ties). Without ``candidates``, a
    coordinate descent along :func:`descent_axes` follows from the fastest of them (never
    varying a key of ``fixed``); its rows follow the first round's in ``candidates``.
    ``progress(evaluated, best_time_over_lb)`` is called after every candidate."""
    import commbench.kernels.fast

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
        sched = commbench.kernels.fast.schedule(traffic, gpus_per_node, unit=unit, **opts)
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
        if progress is not None:
            progress(len(table), best[3].time_over_lb)

    for opts in cands:
        run(opts)
    passes = 0
    if candidates is None:
        passes = _descend(run, table, lambda: best[0], descent_axes(fabric, fixed))
    opts, sched, tr, pred = best
    return Tuned(dict(opts), sched, tr, pred, dict(first[0]), first[1], first[2], table, passes)


def _descend(run, table: list[dict], fastest, axes: list[tuple[tuple, list]]) -> int:
    """Coordinate descent (see the module docstring); returns the passes made.
    ``run(opts)`` evaluates a set and appends its row to ``table``; ``fastest()`` is the
    fastest set so far. A set already in ``table`` is not run again; the tail is not
    moved on a set whose schedule has none (nothing to move: the same schedule)."""
    rows = {_key(row["options"]): row for row in table}
    for npass in range(1, MAX_PASSES + 1):
        start = _key(fastest())
        for keys, combos in axes:
            here = fastest()
            has_tail = rows[_key(here)]["tail_bytes"] > 0
            for combo in combos:
                opts = {k: v for k, v in here.items() if k not in keys}
                opts.update(
                    (k, v)
                    for k, v in zip(keys, combo, strict=True)
                    if not (k in _DEFAULTS and _DEFAULTS[k] == v)
                )
                if not has_tail and opts.get("tail", "last") != here.get("tail", "last"):
                    continue
                if _key(opts) not in rows:
                    run(opts)
                    rows[_key(opts)] = table[-1]
        if _key(fastest()) == start:
            return npass
    return MAX_PASSES
