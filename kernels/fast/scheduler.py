"""FAST schedule synthesis: balancing, server matrix, BvN stages, per-rank plans.

After FAST (Lei et al., arXiv 2505.09764). ``schedule(traffic, gpus_per_node, **options)`` returns a
:class:`Schedule`; every rank computes the same one from the same matrix (all integer
arithmetic, stable sorts, no randomness).

Stage-count strategies (``strategy=``):

- ``"bottleneck"`` (default): each stage's matching maximises its smallest entry, so
  stages are as large as possible and the few largest carry almost all bytes;
- ``"threshold"``: matchings restricted to entries above a power-of-two level that only
  halves (Solstice-style): cheaper, somewhat smaller stages;
- ``"bvn"``: plain BvN (any perfect matching on the support), the paper's decomposition.

All three repair the previous matching instead of rebuilding it. Orthogonal knobs:

- ``quantum`` (bytes, or ``"auto"``): round each server-matrix entry up to a multiple of
  it before decomposing; entries then tie and leave together (fewer stages) at a cost of
  at most ``(S - 1) * quantum`` bytes per NIC; ``"auto"`` picks the largest quantum
  costing at most 1 % of T;
- ``max_stages`` (default ``"auto"`` = max(2 S, 10), which is exact for S <= 4;
  ``None`` = no limit, an exact decomposition): at most this many stages; what they do not carry is sent in a
  rail-aligned **fan-out tail** (every GPU sends its leftovers to all servers at once);
- ``stage_cost_bytes`` (default 0 = off): a fixed per-stage cost alpha * B in bytes; the
  number of stages K is then chosen to minimise
  ``K * alpha_B + stage bytes + [tail] * (alpha_B + tail_penalty * tail bound)``, i.e.
  a stage is kept when it carries more than ``alpha_B / (tail_penalty - 1)`` bytes;
  ``tail_penalty`` (default 2) is what a tail byte costs relative to a stage byte
  (incast, stragglers);
- ``max_stage_bytes`` (bytes, ``"auto"`` or ``None`` = no cap, the default): cut every
  stage heavier than this per NIC (rounded up to the unit) into stages of the same
  permutation and equal weights, so lending ahead and redistributing behind pipeline at
  a finer grain (the cost cut counts each part's fixed cost); ``"auto"`` =
  ``AUTO_STAGE_COST_MULTIPLE * stage_cost_bytes`` (a stage's bytes then take that many
  times its fixed cost; no cap when ``stage_cost_bytes`` is 0). Off by default: the cost
  model finds it a large win only where one GPU lends a lot (zipf at 320 GPUs) and a
  1-4 % loss elsewhere (see docs/cost-model.md);
- ``balance`` (``"pipelined"`` (default) or ``"prologue"``): when the balancing bytes
  move. ``"prologue"``: all in step 0, before any stage. ``"pipelined"``: the bytes rail
  step j sends from the balance buffer are lent during step j, next to rail step j - 1
  and its redistribution, so only rail step 0's lending is a prologue;
- ``tail`` (``"last"`` (default), ``"early"`` or a stage number k >= 1): when the fan-out
  tail is posted. ``"last"``: its own rail step after the last stage, drained in one more
  step (an epilogue). ``"early"`` (= 1) or k: alongside stage k (the last stage if there
  are fewer), drained one step later, its lending one step earlier; the tail's bytes then
  share the NICs with that stage instead of running after all of them (no extra step);
- ``threads`` (default 1): threads that share the O(P^2) pass over the matrix (the
  regions each GPU sends to each server; row blocks, the numba core releases the GIL)
  when there are at least ``PARALLEL_MIN_RANKS`` ranks - below that the pass takes less
  than handing work to another thread. The rest of a schedule is one thread's;
- ``first_stage_fraction`` (a number in (0, 1), default ``None`` = off): the first stage
  (in rail-step order) is split into a leading stage of about this fraction of its
  weight (at least one unit) and the rest, same permutation. Only the leading part's
  lending is then a prologue (with ``balance="pipelined"``); the rest's lending runs
  next to the leading part's rail step. Costs one stage's fixed cost (the stage-count
  cut does not count it).

Bytes each NIC is scheduled to send = the stages' weights (every NIC is busy or idle for
the whole stage) plus its tail; :attr:`Schedule.scheduled_bytes` is the largest over
NICs, next to :attr:`Schedule.lower_bound`.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from commbench.kernels.fast import plan as _plan

STRATEGIES = ("bottleneck", "threshold", "bvn")
DEFAULT_STRATEGY = "bottleneck"
AUTO_MIN_STAGES = 10  # S <= 4 never needs more (S^2 - 2S + 2): exact there
AUTO_STAGE_COST_MULTIPLE = 32  # max_stage_bytes="auto": stage bytes / fixed cost (cost model)
BALANCE_MODES = ("pipelined", "prologue")
TAIL_MODES = ("last", "early")  # or a stage number k >= 1 ("early" = 1)
_MODES = {"bvn": 0, "bottleneck": 1, "threshold": 2}
#: the phases of :meth:`Schedule.transfers` rows, in the order of the core's codes
PHASES = ("intra", "balance", "stage", "redistribute", "tail")
PARALLEL_MIN_RANKS = 512  # ``threads`` > 1 splits the matrix pass from this many ranks on
_MAX_ENTRY = 1 << 62
_INT64 = np.dtype(np.int64)

_compile_seconds: float | None = None


def warmup() -> float:
    """Load (or compile, first time on a machine) the numba core; returns seconds spent.

    Numba caches the machine code on disk (``cache=True``), so only the first run on a
    machine compiles; later processes load. :func:`schedule` calls this itself, outside
    its own timing; :func:`compile_seconds` reports what it cost.
    """
    global _compile_seconds
    if _compile_seconds is not None:
        return _compile_seconds
    t0 = time.perf_counter()
    from commbench.kernels.fast import _core

    d = np.array([[0, 3, 5, 1], [2, 0, 0, 7], [4, 1, 0, 2], [6, 0, 3, 0]], dtype=np.int64)
    _core.minmax(d)
    out = _core.synthesize(d, 2, 1, 0, 1, 1, -1, 1.0, 2.0, 2)
    sums = np.zeros((1, 8), np.int64)  # the threaded path's entry points (schedule(threads=))
    _core.region_rows(d, 2, 1, 0, 0, 4, out[0].copy(), sums[0])
    _core.synthesize_regions(out[0], _core.lower_bound(sums[0], 2), 2, 1, 1, -1, 1.0, 2.0, 2)
    region, c, line, lb, perms, weights, computed, tail = out
    for pipelined in (True, False):
        _core.build_rank(d, 2, 1, 0, region, c, perms, weights, tail, 1, pipelined, 64, 0)
        _core.build(d, 2, 1, 0, region, c, perms, weights, tail, -1, True, pipelined, 64, 64, 0)
        _core.build(d, 2, 1, 0, region, c, perms, weights, tail, 1, False, pipelined, 64, 1, 0)
    _core.synthesize_rank(d, 2, 1, 0, 1, 1, -1, 1.0, 2.0, 2, 1, True, 0, 0)
    _core.synthesize_bound(d, 2, 1, 0, 1, 1, -1, 1.0, 2.0, 2, 1, True, 0, 0, True, 0, 1)
    _core.plan_steps(weights.shape[0], tail, 0)
    _core.ops_guess(1, 2, 2)
    _core.bind_order(np.zeros((0, len(_plan.OP_FIELDS)), np.int64), 1, True, 0, 1, 0)
    _compile_seconds = time.perf_counter() - t0
    return _compile_seconds


def compile_seconds() -> float | None:
    """Seconds the numba core took to load or compile in this process (None: not yet)."""
    return _compile_seconds


@dataclass(frozen=True)
class Stage:
    """One scale-out stage: server s sends to ``perm[s]`` (== s: idle), up to ``nbytes``
    per GPU, GPU i to GPU i (rail-aligned)."""

    perm: np.ndarray
    nbytes: int


class Schedule:
    """A FAST schedule for one traffic matrix (see the module docstring)."""

    def __init__(
        self,
        traffic: np.ndarray,
        options: Scheduler,
        quantum: int,
        max_stages: int | None,
        core: tuple,
        seconds: float,
    ) -> None:
        self.traffic = traffic
        self.nranks = traffic.shape[0]
        self.gpus_per_node = options.gpus_per_node
        self.servers = self.nranks // self.gpus_per_node
        self.unit = unit = options.unit
        self.strategy = options.strategy
        self.quantum = quantum  # bytes (``"auto"`` resolved for this matrix)
        self.max_stages = max_stages  # None: no limit
        self.stage_cost_bytes = options.stage_cost_bytes
        self.tail_penalty = options.tail_penalty
        self.max_stage_bytes = options.max_stage_bytes  # None: stages are not cut
        self.balance = options.balance
        self._tail_step = options.tail_step  # 0: the tail after the last stage
        self.first_stage_fraction = options.first_stage_fraction
        (
            self._region,
            self._caps,
            line,
            lb,
            self.perms,
            self._units,
            self.computed_stages,
            self._tail,
        ) = core
        self.line_sum = int(line) * unit  # T: padded line sum of the server matrix, bytes
        self.lower_bound = int(lb)
        self._weights: np.ndarray | None = None
        self.synthesis_seconds = seconds
        self._plans: dict[int, _plan.RankPlan] = {}
        self._nsteps: int | None = None

    # ------------------------------------------------------------------ summary numbers
    @property
    def tail(self) -> str | int:
        """When the fan-out tail is posted: ``"last"`` or the stage number it joins."""
        return self._tail_step or "last"

    @functools.cached_property
    def stages(self) -> list[Stage]:
        return [Stage(self.perms[k], int(self.weights[k])) for k in range(len(self.weights))]

    @property
    def weights(self) -> np.ndarray:
        """Bytes per GPU in each stage (made on first use: a per-call user may not ask)."""
        if self._weights is None:
            self._weights = self._units * self.unit
        return self._weights

    @property
    def nstages(self) -> int:
        return len(self._units)

    @property
    def stage_bytes(self) -> int:
        """Bytes every NIC is busy (or idle) for during the stages."""
        return int(self.weights.sum())

    @functools.cached_property
    def tail_bytes_per_nic(self) -> np.ndarray:
        """Per NIC: the larger of the tail bytes it sends and receives (unit-rounded)."""
        g = self.gpus_per_node
        sent = self._tail.sum(axis=1)
        recv = np.zeros(self.nranks, dtype=np.int64)
        s = self.servers
        for t in range(s):  # receiver (t, a) gets tail[s * G + a, t] from every s
            recv[t * g : (t + 1) * g] = self._tail[:, t].reshape(s, g).sum(axis=0)
        return np.maximum(sent, recv) * self.unit

    @property
    def tail_bytes(self) -> int:
        return int(self.tail_bytes_per_nic.max(initial=0))

    @property
    def scheduled_bytes_per_nic(self) -> np.ndarray:
        """Scale-out bytes each NIC is scheduled for: the stages plus its tail."""
        return self.stage_bytes + self.tail_bytes_per_nic

    @property
    def scheduled_bytes(self) -> int:
        """The busiest NIC's scheduled bytes (compare with :attr:`lower_bound`)."""
        return self.stage_bytes + self.tail_bytes

    @property
    def tail_fraction(self) -> float:
        """Share of all scale-out bytes sent in the fan-out tail."""
        total = int(
            self._region.sum()
            - np.trace(self._region.reshape(self.servers, self.gpus_per_node, self.servers).sum(1))
        )
        return float(self._tail.sum()) / total if total else 0.0

    def cost_bytes(self, stage_cost_bytes: float = 0.0, tail_penalty: float | None = None) -> float:
        """Modelled per-NIC scale-out time in bytes: stages' fixed costs + bytes + tail."""
        pen = self.tail_penalty if tail_penalty is None else tail_penalty
        cost = self.nstages * stage_cost_bytes + self.stage_bytes
        if self.tail_bytes:
            cost += stage_cost_bytes + pen * self.tail_bytes
        return float(cost)

    def summary(self) -> dict:
        """Numbers for a result record or a table."""
        return {
            "strategy": self.strategy,
            "balance": self.balance,
            "tail": self.tail,
            "max_stage_bytes": self.max_stage_bytes,
            "first_stage_fraction": self.first_stage_fraction,
            "servers": self.servers,
            "gpus_per_node": self.gpus_per_node,
            "stages": self.nstages,
            "stages_computed": int(self.computed_stages),
            "T_bytes": self.line_sum,
            "lower_bound_bytes": self.lower_bound,
            "stage_bytes": self.stage_bytes,
            "tail_bytes": self.tail_bytes,
            "scheduled_bytes": self.scheduled_bytes,
            "overhead": self.scheduled_bytes / self.lower_bound - 1 if self.lower_bound else 0.0,
            "tail_fraction": self.tail_fraction,
            "synthesis_us": self.synthesis_seconds * 1e6,
        }

    # ------------------------------------------------------------------ plans
    def _build(self, want: int, with_pieces: bool) -> tuple:
        """``(ops, rank_start, pieces, bufbytes)`` from the core; the tables are sized by
        a guess and, in the rare case it is short, built again at the size it counted."""
        build = _core_fn("build")
        g = self.gpus_per_node
        cap_ops = _ops_guess(len(self._units), self.servers, g) * (1 if want >= 0 else self.nranks)
        cap_pcs = 4 * cap_ops if with_pieces else 1
        while True:
            ops, first, nops, pcs, npcs, bufbytes = build(
                self.traffic, g, self.unit, _shift(self.unit), self._region, self._caps,
                self.perms, self._units, self._tail, want, with_pieces,
                self.balance == "pipelined", cap_ops, cap_pcs, self._tail_step)  # fmt: skip
            if nops <= cap_ops and npcs <= cap_pcs:
                return ops, first, pcs, bufbytes
            cap_ops, cap_pcs = max(cap_ops, nops), max(cap_pcs, npcs)

    @property
    def nsteps(self) -> int:
        """Steps of every rank's plan: balance, rail steps (stages, a last tail), last drain."""
        # cached by hand (functools.cached_property takes a lock); a per-call scheduler's
        # fused call of the core sets it (a microsecond counts here)
        if self._nsteps is None:
            self._nsteps = _core_fn("plan_steps")(len(self._units), self._tail, self._tail_step)
        return self._nsteps

    def plan(self, rank: int) -> _plan.RankPlan:
        """The ops ``rank`` posts, step by step (see :mod:`commbench.kernels.fast.plan`)."""
        rank = int(rank)
        pl = self._plans.get(rank)
        if pl is None:
            if not 0 <= rank < self.nranks:
                raise ValueError(f"rank {rank} is outside 0..{self.nranks - 1}")
            build = _core_fn("build_rank")
            cap = _ops_guess(len(self._units), self.servers, self.gpus_per_node)
            while True:  # the table is sized by a guess; rarely short, then built again
                rows, nops, *b = build(
                    self.traffic, self.gpus_per_node, self.unit, _shift(self.unit), self._region,
                    self._caps, self.perms, self._units, self._tail, rank,
                    self.balance == "pipelined", cap, self._tail_step)  # fmt: skip
                if nops <= cap:
                    break
                cap = nops
            pl = self._plans[rank] = self._rank_plan(rank, rows, b)
        return pl

    def plans(self) -> list[_plan.RankPlan]:
        """Every rank's plan, from one walk of the schedule."""
        ops, first, _, bufbytes = self._build(-1, False)
        for r in range(self.nranks):
            if r not in self._plans:
                rows = ops[first[r] : first[r + 1]]
                self._plans[r] = self._rank_plan(r, rows, bufbytes[r].tolist())
        return [self._plans[r] for r in range(self.nranks)]

    def _rank_plan(
        self, rank: int, rows: np.ndarray, b: list, order: tuple | None = None
    ) -> _plan.RankPlan:
        sizes = {_plan.BALANCE: b[0], _plan.STAGE0: b[1], _plan.STAGE1: b[2], _plan.TAIL: b[3]}
        # the core's rows are C-contiguous int64: read them as ops in place (what ops_view
        # does, without its checks and at a third of the cost)
        ops = np.frombuffer(rows, _plan.OP_DTYPE)
        return _plan.RankPlan(rank, ops, self.nsteps, sizes, order)

    def extra_memory(self) -> dict:
        """Scratch bytes per rank and as a fraction of the send + receive buffers."""
        _, _, _, bufbytes = self._build(-1, False)
        extra = bufbytes.sum(axis=1)
        moved = self.traffic.sum(axis=1) + self.traffic.sum(axis=0)
        total = int(moved.sum())
        return {
            "max_rank_bytes": int(extra.max(initial=0)),
            "total_bytes": int(extra.sum()),
            "fraction": float(extra.sum()) / total if total else 0.0,
            "max_rank_fraction": float(np.max(extra / np.maximum(moved, 1), initial=0.0)),
            "per_buffer_max": {
                _plan.BUFFER_NAMES[b]: int(bufbytes[:, i].max(initial=0))
                for i, b in enumerate(_plan.SCRATCH_BUFFERS)
            },
        }

    def transfers(self):
        """One row per move of a piece of one (origin, final) pair: a pandas DataFrame
        with columns ``phase, stage, src, dst, origin, final, nbytes, step`` (``stage`` is
        -1 outside stages; phase ``tail`` is the fan-out tail; rows with ``src == dst``
        are local copies; ``step`` is the plan step that moves the row)."""
        import pandas as pd

        _, _, pieces, _ = self._build(-1, True)
        frame = pd.DataFrame(
            pieces, columns=["phase", "stage", "src", "dst", "origin", "final", "nbytes", "step"]
        )
        frame["phase"] = pd.Categorical.from_codes(pieces[:, 0], categories=list(PHASES))
        return frame


class Scheduler:
    """FAST's options, checked once: ``Scheduler(G, **options)(traffic)`` is
    ``schedule(traffic, G, **options)``. A caller that schedules matrix after matrix with
    the same options (``fast+sched``, an MoE layer) keeps one and pays per call only for
    the matrix. ``ValueError`` on a bad option, saying which."""

    def __init__(
        self,
        gpus_per_node: int,
        *,
        unit: int = 1,
        strategy: str = DEFAULT_STRATEGY,
        quantum: int | str | None = None,
        max_stages: int | str | None = "auto",
        stage_cost_bytes: float = 0.0,
        tail_penalty: float = 2.0,
        max_stage_bytes: int | str | None = None,
        balance: str = "pipelined",
        tail: str | int = "last",
        first_stage_fraction: float | None = None,
        threads: int = 1,
    ) -> None:
        self.gpus_per_node = _gpus_per_node(gpus_per_node)
        self.unit = _positive_int(unit, "unit")
        if strategy not in _MODES:
            raise ValueError(
                f"unknown strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}"
            )
        self.strategy = strategy
        if quantum is not None and quantum != "auto":
            _positive_int(quantum, "quantum")
        self.quantum = quantum
        if max_stages not in ("auto", None):
            max_stages = _positive_int(max_stages, "max_stages", allow_zero=True)
        self.max_stages = max_stages
        stage_cost = float(stage_cost_bytes)
        if not math.isfinite(stage_cost) or stage_cost < 0:
            raise ValueError(
                f"stage_cost_bytes must be a finite number >= 0, got {stage_cost_bytes!r}"
            )
        self.stage_cost_bytes = stage_cost
        penalty = float(tail_penalty)
        if not math.isfinite(penalty) or penalty < 1:
            raise ValueError(
                "tail_penalty must be >= 1 (a tail byte costs at least a stage byte), "
                f"got {tail_penalty!r}"
            )
        self.tail_penalty = penalty
        if balance not in BALANCE_MODES:
            raise ValueError(
                f"unknown balance {balance!r}: choose one of {', '.join(BALANCE_MODES)}"
            )
        self.balance = balance
        self.tail_step = _tail_step(tail)
        self.first_stage_fraction = _fraction(first_stage_fraction)
        self.threads = _positive_int(threads, "threads")
        if max_stage_bytes == "auto":
            self.max_stage_bytes = round(AUTO_STAGE_COST_MULTIPLE * stage_cost) or None
        elif max_stage_bytes is None:
            self.max_stage_bytes = None
        else:
            self.max_stage_bytes = _positive_int(max_stage_bytes, "max_stage_bytes")
        warmup()
        from commbench.kernels.fast import _core

        self._core = _core
        self._shift = _shift(self.unit)
        self._max_units = -(-self.max_stage_bytes // self.unit) if self.max_stage_bytes else 0
        self._ops_cap = 0  # rows of the op table of a call with ``rank`` (0: the core guesses)

    def __call__(
        self, traffic, rank: int | None = None, posting: tuple[bool, int, int] | None = None
    ) -> Schedule:
        """The schedule of ``traffic`` (P x P int bytes, row = source rank, rank = server *
        gpus_per_node + local index). ``rank``: also build that rank's plan, in the same
        call of the core (what a per-call user needs next). ``posting``: also put the
        plan's ops in posting order for the executor that will run it
        (:attr:`PlanExecutor.posting <commbench.kernels.fast.executor.PlanExecutor.posting>`),
        still in that one call: the plan's ``order``, which its bind then takes as is."""
        g = self.gpus_per_node
        d = _checked_matrix(traffic, g)
        p = d.shape[0]
        if rank is not None and not (isinstance(rank, (int, np.integer)) and 0 <= rank < p):
            raise ValueError(f"rank {rank!r} is outside 0..{p - 1}")
        if self.max_stages == "auto":
            cap = max(2 * (p // g), AUTO_MIN_STAGES)
        else:
            cap = -1 if self.max_stages is None else self.max_stages
        core_mod = self._core
        unit = self.unit
        t0 = time.perf_counter()
        q_units = _quantum_units(self.quantum, d, g, unit)
        rest = (q_units, _MODES[self.strategy], cap, self.stage_cost_bytes / unit,
                self.tail_penalty, self._max_units)  # fmt: skip
        built = bound = None
        if self.threads > 1 and p >= PARALLEL_MIN_RANKS:
            region, lb = _regions_threaded(d, g, unit, self.threads)
            core = core_mod.synthesize_regions(region, lb, g, *rest)
        elif rank is None or self.first_stage_fraction is not None:
            core = core_mod.synthesize(d, g, unit, self._shift, *rest)
        else:
            plan_args = (rank, self.balance == "pipelined", self.tail_step, self._ops_cap)
            if posting is None:
                out = core_mod.synthesize_rank(d, g, unit, self._shift, *rest, *plan_args)
            else:
                out = core_mod.synthesize_bound(d, g, unit, self._shift, *rest, *plan_args,
                                                *posting)  # fmt: skip
                bound = out[14:]
            core, built = out[:8], out[8:14]
        if self.first_stage_fraction is not None:
            core = _split_first(core, self.first_stage_fraction)
        sched = Schedule(d, self, q_units * unit, None if cap < 0 else cap, core,
                         time.perf_counter() - t0)  # fmt: skip
        if bound is not None:
            sched._nsteps = bound[0]
        if built is not None and built[1] <= len(built[0]):  # else plan() sizes it again
            order = None if bound is None else (posting, bound[1], bound[2])
            sched._plans[rank] = sched._rank_plan(rank, built[0], built[2:], order)
        if rank is not None:
            sched.plan(rank)
        return sched


#: FAST's options and their defaults: :class:`Scheduler`'s keywords but ``unit`` (the
#: caller's element size), read from its signature so that they are named once
#: (``--param`` keys, the model's tuner).
OPTIONS: Mapping[str, object] = MappingProxyType(
    {
        name: prm.default
        for name, prm in inspect.signature(Scheduler).parameters.items()
        if prm.kind is inspect.Parameter.KEYWORD_ONLY and name != "unit"
    }
)


def schedule(traffic, gpus_per_node: int, **options) -> Schedule:
    """Synthesise the FAST schedule of ``traffic`` (P x P int bytes, row = source rank,
    rank = server * gpus_per_node + local index). ``unit``: alignment in bytes (pass
    the element size to never split an element); pieces are cut at multiples of it and
    a pair's last piece keeps its short tail. The options are :class:`Scheduler`'s (and
    the module docstring's). ``ValueError`` on bad input, saying what and where."""
    return Scheduler(gpus_per_node, **options)(traffic)


_pool: ThreadPoolExecutor | None = None  # schedule_ahead's
_workers: ThreadPoolExecutor | None = None  # the threads that share a schedule's matrix pass


def _regions_threaded(d: np.ndarray, g: int, unit: int, threads: int) -> tuple[np.ndarray, int]:
    """The core's ``regions`` on ``threads`` threads: this one and ``threads - 1``
    workers, one block of rows each, each adding into its own row of byte sums."""
    global _workers
    from commbench.kernels.fast import _core

    if _workers is None:
        _workers = ThreadPoolExecutor(os.cpu_count() or 1, "fast-regions")
    p = d.shape[0]
    s = p // g
    region = np.empty((p, s), np.int64)
    sums = np.zeros((threads, p + 2 * s), np.int64)
    cuts = [p * i // threads for i in range(threads + 1)]
    shift = _shift(unit)
    rows = _core.region_rows
    others = [_workers.submit(rows, d, g, unit, shift, cuts[i], cuts[i + 1], region, sums[i])
              for i in range(1, threads)]  # fmt: skip
    rows(d, g, unit, shift, cuts[0], cuts[1], region, sums[0])
    for f in others:
        f.result()
    return region, _core.lower_bound(sums.sum(axis=0), g)


def schedule_ahead(traffic, gpus_per_node: int, *, rank: int | None = None, **options) -> Future:
    """:func:`schedule` on a background thread: a future whose result is the
    :class:`Schedule`, with ``rank``'s plan already built when ``rank`` is given.

    For a caller that knows a matrix before it needs its schedule (an MoE layer knows
    its combine's matrix, the transpose of its dispatch's, as soon as it has routed):
    the numba core releases the GIL, so the synthesis runs on another core while this
    thread posts and waits for the current transfer. The matrix is copied first, so the
    caller may reuse its array. Bad input raises from ``result()``, as :func:`schedule`
    would."""
    global _pool
    warmup()  # load the core here, not on the worker (and once)
    if _pool is None:
        _pool = ThreadPoolExecutor(min(4, os.cpu_count() or 1), "fast-schedule")
    d = np.array(traffic, copy=True)

    def work() -> Schedule:
        return Scheduler(gpus_per_node, **options)(d, rank)

    return _pool.submit(work)


def server_matrix(traffic, gpus_per_node: int, unit: int = 1) -> tuple[np.ndarray, int]:
    """``(M, T)``: the balanced server matrix padded so every line sums to T (units of
    ``unit`` bytes) - the matrix the stages decompose (for reference decompositions)."""
    d = check_traffic(traffic, gpus_per_node)
    unit = _positive_int(unit, "unit")
    warmup()
    from commbench.kernels.fast import _core

    out = _core.synthesize(d, int(gpus_per_node), unit, _shift(unit), 1, 1, 0, 0.0, 2.0, 0)
    m = np.ascontiguousarray(out[1])
    line = int(out[2])
    _core.pad(m, line)
    return m, line


def check_traffic(traffic, gpus_per_node: int) -> np.ndarray:
    """The traffic matrix as C-contiguous int64, or ``ValueError`` saying what is wrong."""
    return _checked_matrix(traffic, _gpus_per_node(gpus_per_node))


def _gpus_per_node(gpus_per_node) -> int:
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, (int, np.integer)):
        raise ValueError(f"gpus_per_node must be an integer, got {gpus_per_node!r}")
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be at least 1, got {gpus_per_node}")
    return int(gpus_per_node)


def _checked_matrix(traffic, gpus_per_node: int) -> np.ndarray:
    """:func:`check_traffic` for a node size already checked."""
    d = traffic if type(traffic) is np.ndarray else np.asarray(traffic)
    if d.ndim != 2 or d.shape[0] != d.shape[1] or d.shape[0] == 0:
        raise ValueError(f"traffic must be a square P x P matrix (P >= 1), got shape {d.shape}")
    if d.dtype != _INT64:
        if d.dtype.kind == "f":
            bad = np.argwhere(~np.isfinite(d))
            where = (
                f" (traffic[{bad[0][0]}][{bad[0][1]}] is {d[tuple(bad[0])]})" if len(bad) else ""
            )
            raise ValueError(f"traffic must hold integer byte counts, got dtype {d.dtype}{where}")
        if d.dtype.kind not in "iu":
            raise ValueError(f"traffic must hold integer byte counts, got dtype {d.dtype}")
        if d.dtype.kind == "u" and d.size and int(d.max()) >= _MAX_ENTRY:
            i, j = np.unravel_index(int(d.argmax()), d.shape)
            raise ValueError(f"traffic[{i}][{j}] = {d[i, j]} is too large (limit 2**62 bytes)")
        d = np.ascontiguousarray(d, dtype=np.int64)
    elif not d.flags.c_contiguous:
        d = np.ascontiguousarray(d)
    lo, hi = _core_fn("minmax")(d)
    if lo < 0:
        i, j = np.unravel_index(int(d.argmin()), d.shape)
        raise ValueError(f"traffic[{i}][{j}] is negative ({d[i, j]})")
    p = d.shape[0]
    if p % gpus_per_node:
        raise ValueError(f"traffic has {p} ranks, not a multiple of gpus_per_node={gpus_per_node}")
    if hi >= _MAX_ENTRY // p:
        i, j = np.unravel_index(int(d.argmax()), d.shape)
        raise ValueError(
            f"traffic[{i}][{j}] = {d[i, j]} is too large: row sums must stay below 2**62 bytes"
        )
    return d


_core_fns: dict = {}  # the numba core's functions, once imported


def _core_fn(name: str):
    """A function of the numba core (imported on first use: numba is slow to import)."""
    fn = _core_fns.get(name)
    if fn is None:
        from commbench.kernels.fast import _core

        fn = _core_fns[name] = getattr(_core, name)
    return fn


def _ops_guess(stages: int, servers: int, gpus_per_node: int) -> int:
    """The core's :func:`~commbench.kernels.fast._core.ops_guess`."""
    return _core_fn("ops_guess")(stages, servers, gpus_per_node)


def _shift(unit: int) -> int:
    """log2(unit) when unit is a power of two (the core then shifts), else -1."""
    return unit.bit_length() - 1 if unit & (unit - 1) == 0 else -1


def _positive_int(value, name: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < (0 if allow_zero else 1):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '>= 1'}, got {value}")
    return int(value)


def _tail_step(tail) -> int:
    """``tail`` as the core's ``tail_step`` (0: after the last stage)."""
    if tail == "last":
        return 0
    if tail == "early":
        return 1
    if isinstance(tail, str) or isinstance(tail, bool) or not isinstance(tail, (int, np.integer)):
        raise ValueError(
            f"unknown tail {tail!r}: choose one of {', '.join(TAIL_MODES)} or a stage number >= 1"
        )
    return _positive_int(tail, "tail")


def _fraction(value) -> float | None:
    """``first_stage_fraction`` checked: None or a number strictly between 0 and 1."""
    if value is None:
        return None
    try:
        f = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        f = math.nan
    if not 0.0 < f < 1.0:
        raise ValueError(f"first_stage_fraction must be a number in (0, 1) or None, got {value!r}")
    return f


def _split_first(core: tuple, fraction: float) -> tuple:
    """The core's result with its first stage split into a leading part of about
    ``fraction`` of its weight (>= 1 unit) and the rest, same permutation. Every server
    pair keeps its capacity, so balancing and the tail are unchanged."""
    region, c, line, lb, perms, weights, computed, tail = core
    if len(weights) == 0 or weights[0] < 2:
        return core
    w0 = int(weights[0])
    lead = min(max(1, round(fraction * w0)), w0 - 1)
    perms = np.concatenate([perms[:1], perms])
    weights = np.concatenate([np.array([lead, w0 - lead], dtype=weights.dtype), weights[1:]])
    return region, c, line, lb, perms, weights, computed, tail


def _quantum_units(quantum, d: np.ndarray, g: int, unit: int) -> int:
    if quantum is None:
        return 1
    if quantum == "auto":
        p = d.shape[0]
        s = p // g
        if s < 2:
            return 1
        # T is at least the busiest server's cross bytes / G; (S-1) quanta <= 1 % of that
        blocks = d.reshape(s, g, s, g).sum(axis=(1, 3))
        np.fill_diagonal(blocks, 0)
        busiest = max(int(blocks.sum(axis=0).max()), int(blocks.sum(axis=1).max()))
        return max(1, busiest // g // unit // (100 * (s - 1)))
    q = _positive_int(quantum, "quantum")
    return max(1, -(-q // unit))
