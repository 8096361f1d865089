"""``commbench run alltoallv --impl fast | fast+sched | balance-only``.

* ``fast``: the FAST schedule is computed in ``setup`` (once per traffic matrix, outside
  the timed region) and ``info()`` reports its synthesis time next to the stage count,
  the lower bound, the scheduled bytes and the scratch memory;
* ``fast+sched``: the schedule (and this rank's plan) is recomputed inside every
  ``run()`` call, as an MoE layer whose routing changes every step needs: the
  "including scheduling" variant;
* ``balance-only``: the ablation - FAST's sender balancing, then every GPU sends its
  balanced pool rail-aligned to all servers at once (the schedule with zero stages, all in
  the fan-out tail), then the redistribution. Shows what the stages buy.

Options (``--param KEY=VALUE``) for ``fast`` and ``fast+sched``: every keyword option of
:class:`commbench.kernels.fast.Scheduler` but ``unit`` (``strategy``, ``quantum``, ``max_stages``,
``stage_cost_bytes``, ``tail_penalty``, ...; ``none`` means None); for all three:
``groups`` = ``world`` (one group per step, default) or ``split`` (node and rail
communicators; see :mod:`commbench.kernels.fast.executor`); ``sync`` = ``rail`` (a barrier of
the rail before each stage after the first: stages run as rounds; the cpu default) or
``none`` (the GPU backends' default and only choice); for ``fast+sched``: ``ahead`` = ``0``
(default) or ``1`` (the next call's schedule is made during this call's transfer); for
``fast``: ``tune`` = ``none`` (default) or ``model``: the options are chosen per traffic
matrix by the cost model for the run's ``--system`` profile
(:func:`commbench.kernels.model.tune.tune_fast`: rank 0 models a grid of candidate
options, including one that keeps no stage, and every rank schedules with the fastest;
explicit ``--param`` options are never varied). The model cannot run on every call, so
``fast+sched`` does not take it.
"""

from __future__ import annotations

import time

import numpy as np

from commbench.kernels import timeline
from commbench.kernels.cases import AlltoallvCase
from commbench.kernels.fast import OPTIONS, Scheduler, compile_seconds, schedule_ahead, warmup
from commbench.kernels.fast.executor import PlanExecutor, load
from commbench.kernels.registry import register

_NONE = ("none", "None")


def schedule_options(
    name: str, params: dict, allowed: tuple[str, ...], others: tuple[str, ...] = ()
) -> tuple[dict, str]:
    """``(scheduler options, groups, sync)`` from ``--param`` values (sync None: the
    executor's default); ``ValueError`` naming an unknown key. Values are checked by the
    scheduler and the executor. ``others``: keys the caller takes out first (only named
    in the message)."""
    opts = dict(params)
    groups = str(opts.pop("groups", "world"))
    sync = opts.pop("sync", None)
    unknown = sorted(set(opts) - set(allowed))
    if unknown:
        known = ", ".join((*allowed, *others, "groups", "sync"))
        raise ValueError(f"{name}: unknown --param {unknown[0]!r} (known: {known})")
    for key, value in opts.items():
        if value in _NONE:
            opts[key] = None
    return opts, groups, None if sync is None else str(sync)


class _Fast:
    """FAST schedule + per-rank executor; the schedule is made in ``setup``."""

    name = "fast"
    allowed: tuple[str, ...] = tuple(OPTIONS)
    others: tuple[str, ...] = ()  # the subclass's own --param keys, taken out before
    PARAMS = (*OPTIONS, "groups", "sync")
    fixed: dict = {}

    def __init__(self, transport, params: dict) -> None:
        opts, groups, sync = schedule_options(self.name, params, self.allowed, self.others)
        self.options = {**opts, **self.fixed}
        self.transport = transport
        self.executor = PlanExecutor(transport, groups, sync)
        topo = transport.topo
        if topo.rank == 0:  # one rank compiles a stale numba cache, the others then load it
            warmup()
        topo.world.barrier()
        g = topo.gpus_per_node
        self._schedulers = {1: Scheduler(g, unit=1, **self.options)}  # bad options fail here
        self.schedule = None
        self._plan_us = 0.0

    def _synthesize(
        self, traffic: np.ndarray, unit: int, rank: int | None = None, posting: tuple | None = None
    ):
        """The schedule of ``traffic`` (and ``rank``'s plan, in ``posting`` order),
        options checked once per unit."""
        scheduler = self._schedulers.get(unit)
        if scheduler is None:
            g = self.transport.topo.gpus_per_node
            scheduler = self._schedulers[unit] = Scheduler(g, unit=unit, **self.options)
        return scheduler(traffic, rank, posting)

    def setup(self, case: AlltoallvCase) -> None:
        sched, problem = self.schedule, None
        if (
            sched is None
            or sched.unit != case.unit
            or not np.array_equal(sched.traffic, case.traffic)
        ):
            try:
                sched = self._synthesize(case.traffic, case.unit)
                t0 = time.perf_counter()
                sched.plan(self.transport.topo.rank)
                self._plan_us = (time.perf_counter() - t0) * 1e6
            except ValueError as exc:  # every rank must hear about it, not just this one
                sched, problem = None, str(exc)
        load(self.executor, sched, case, problem, self.name)
        self.schedule = sched

    def run(self, case: AlltoallvCase) -> None:
        self.executor.run()

    def info(self) -> dict:
        sched = self.schedule
        mem = sched.extra_memory()
        out = sched.summary()
        out.update(
            plan_us=self._plan_us,
            numba_load_s=compile_seconds(),
            steps=self.executor.nsteps,
            groups=self.executor.groups,
            sync=self.executor.sync,
            extra_mem_fraction=mem["fraction"],
            extra_mem_max_rank_fraction=mem["max_rank_fraction"],
            extra_bytes_max_rank=mem["max_rank_bytes"],
            scratch_bytes=self.executor.scratch_bytes,
        )
        return out


#: the model-tuning candidate that keeps no stage: balancing, the balanced rail-aligned
#: fan-out tail, its redistribution (what FAST is where the stages do not pay)
NO_STAGES = {"tail_penalty": 1.0}


@register("alltoallv", "fast")
class Fast(_Fast):
    """FAST: balancing, rail-aligned BvN stages, pipelined redistribution (schedule in setup)."""

    others = ("tune",)
    PARAMS = (*_Fast.PARAMS, *others)

    def __init__(self, transport, params: dict) -> None:
        params = dict(params)
        self.tune = str(params.pop("tune", "none"))
        if self.tune not in ("none", "model"):
            raise ValueError(f"{self.name}: --param tune must be none or model, got {self.tune!r}")
        super().__init__(transport, params)
        self._fixed = {k: self.options[k] for k in params if k in OPTIONS}  # never tuned
        self._fabric, self._fabric_from, self._tuning = None, "", None

    def tune_with(self, fabric, source: str) -> None:
        """The cost model's fabric for ``tune=model`` (the harness's, from ``--system``)."""
        self._fabric, self._fabric_from = fabric, source

    def _synthesize(self, traffic: np.ndarray, unit: int, rank=None, posting=None):
        if self.tune != "model":
            return super()._synthesize(traffic, unit, rank, posting)
        if self._fabric is None:
            raise ValueError("fast: --param tune=model needs the run's --system profile")
        options = self._tuned_options(traffic, unit)
        g = self.transport.topo.gpus_per_node
        return Scheduler(g, unit=unit, **options)(traffic, rank, posting)

    def _tuned_options(self, traffic: np.ndarray, unit: int) -> dict:
        """Rank 0 models the candidates; every rank gets the fastest's options (the
        schedule must be the same everywhere)."""
        from commbench.kernels.model.tune import candidate_options, tune_fast

        world = self.transport.topo.world
        tuned = None
        if self.transport.topo.rank == 0:
            t0 = time.perf_counter()
            fixed = self._fixed
            try:
                cands = candidate_options(self._fabric, fixed)
                cands.append({**cands[0], **NO_STAGES, **fixed})
                result = tune_fast(traffic, self._fabric.gpus_per_node, self._fabric,
                                   unit=unit, fixed=fixed, candidates=cands)  # fmt: skip
            except ValueError as exc:  # said on every rank, not only here
                tuned = {"error": f"fast: tuning by the model failed: {exc}"}
            else:
                tuned = {  # the keys of `commbench simulate`'s info.tuning, and more
                    "by": "model",
                    "fabric": self._fabric_from,
                    "options": result.options,
                    "candidates": len(result.candidates),
                    "passes": result.passes,
                    "best_time_us": result.prediction.time_us,
                    "default_time_us": result.default_time_us,
                    "seconds": time.perf_counter() - t0,
                }
        tuned = world.bcast(tuned, root=0)
        if "error" in tuned:
            raise ValueError(tuned["error"])
        self._tuning = tuned
        return dict(tuned["options"])

    def info(self) -> dict:
        out = super().info()
        if self._tuning is not None:  # as `commbench simulate`'s tuned records say it
            out.update(tuned=True, options=self._tuning["options"], tuning=self._tuning)
        return out


@register("alltoallv", "fast+sched", capturable=False)
class FastSched(_Fast):
    """FAST with the schedule recomputed inside every call (MoE training's case).

    ``--param ahead=1``: each call also starts the next call's schedule on a background
    thread (:func:`commbench.kernels.fast.schedule_ahead`) before its transfer, as an MoE layer
    can once it has routed; a benchmark's next matrix is this call's. The next call
    uses it if it was made for that call's matrix, else schedules as usual."""

    name = "fast+sched"
    others = ("ahead",)
    PARAMS = (*_Fast.PARAMS, *others)

    def __init__(self, transport, params: dict) -> None:
        params = dict(params)
        ahead = str(params.pop("ahead", "0"))
        if ahead not in ("0", "1"):
            raise ValueError(f"{self.name}: --param ahead must be 0 or 1, got {ahead!r}")
        super().__init__(transport, params)
        self.ahead = ahead == "1"
        self._next = None

    def setup(self, case: AlltoallvCase) -> None:
        super().setup(case)
        self._sched_s, self._calls, self._ahead_used, self._next = 0.0, 0, 0, None

    def run(self, case: AlltoallvCase) -> None:
        """Schedule ``case.traffic`` (every rank must pass the same matrix, as an MoE
        layer's all-gathered routing counts are) and this rank's plan in the executor's
        posting order, in one call of the core; bind it; execute (each step posted from
        its buffer offsets, step j + 1's read while step j is in flight)."""
        t0 = time.perf_counter()
        rank = self.transport.topo.rank
        sched = self._made_ahead(case)
        if sched is None:
            sched = self._synthesize(case.traffic, case.unit, rank, self.executor.posting)
        self.executor.bind(sched.plan(rank), case.send, case.recv, once=True)
        if self.ahead:
            self._next = schedule_ahead(case.traffic, self.transport.topo.gpus_per_node,
                                        rank=rank, unit=case.unit, **self.options)  # fmt: skip
        self._sched_s += time.perf_counter() - t0
        self._calls += 1
        self.schedule = sched
        tl = timeline.active()
        if tl:
            tl.mark("schedule")
        self.executor.run()

    def _made_ahead(self, case: AlltoallvCase):
        """The schedule the previous call started, if it is for this call's matrix."""
        future, self._next = self._next, None
        if future is None:
            return None
        try:
            sched = future.result()
        except ValueError:  # scheduling this matrix now raises the same, on this thread
            return None
        if sched.unit != case.unit or not np.array_equal(sched.traffic, case.traffic):
            return None
        self._ahead_used += 1
        return sched

    def info(self) -> dict:
        out = super().info()
        out.update(
            calls=self._calls,
            per_call_schedule_us=self._sched_s / self._calls * 1e6 if self._calls else None,
            ahead=self.ahead,
            ahead_used=self._ahead_used,
        )
        return out


@register("alltoallv", "balance-only")
class BalanceOnly(_Fast):
    """Ablation: FAST's balancing, then rail-aligned sends to all servers at once (no stages)."""

    name = "balance-only"
    allowed = ()
    PARAMS = ("groups", "sync")
    fixed = {"max_stages": 0, "balance": "prologue"}
