"""Modelled all-to-allv: fan-out, spread-out, a FAST schedule and its balance-only ablation.

Every function takes the P x P traffic matrix (bytes, row = sender, rank = node * G +
local index) and a :class:`~commbench.kernels.model.fabric.Fabric`, and returns a
:class:`Prediction` with every rank's finish time. Self traffic (the diagonal) is a local
copy and costs nothing. The steps are those of the executors in the FAST paper:

* ``fanout``: one step holding every send and receive (NCCL/RCCL grouped send/recv).
* ``spreadout``: P - 1 steps; at step k rank r sends to ``(r + k) mod P`` and receives
  from ``(r - k) mod P``; a step starts on each rank when its previous one ended.
* ``fast``: the schedule's ``transfers()`` table, in the steps of its per-rank plans
  (``kernels/fast/plan.py``): the table's ``step`` column when it has one (what the
  plans do, pipelined balancing and cut stages included). Otherwise: step 0 balances (``balance`` rows); step j = 1..K runs
  stage j's rail transfers over the NICs together with, on scale-up, the intra-server
  traffic (j = 1) and the redistribution of stage j - 1; step K + 1 sends the fan-out
  ``tail`` (if any: every GPU to all servers at once) and redistributes stage K; step
  K + 2 drains the tail (``redistribute`` rows with stage -1). ``balance="prologue"`` or
  ``"pipelined"`` ignores the ``step`` column and derives the steps that way, lending all
  up front or each rail step's bytes in the step before it (what-ifs; see
  docs/cost-model.md).
* ``balance_only``: balancing, then every rail transfer at once (incast up to S - 1
  senders per NIC), then all redistribution.
* ``mpi``: ``MPI_Alltoallv`` as Open MPI's ``coll/tuned`` picks it by communicator size
  (basic linear = ``fanout``'s one step, pairwise = ``spreadout``'s steps).
* ``pxn`` (NCCL's PXN-like fan-out): bytes for GPU j of another server first move over
  scale-up to GPU j of the sender's server, which sends them over rail j; ``deepep``
  (DeepEP-like dispatch): bytes go over the sender's own rail to the same-index GPU of the
  destination server, which forwards them over scale-up. Both are rail-aligned fan-outs
  (up to S - 1 senders per NIC) whose two hops are chunk-pipelined: one step holding both
  hops' flows. Intra-server traffic goes directly.

:func:`call_overhead_us` is what a FAST call costs before its first step: the all-gather
of the traffic matrix and the schedule's synthesis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from commbench.kernels.fast.scheduler import BALANCE_MODES, PHASES
from commbench.kernels.model.fabric import Fabric, step_finish
from commbench.kernels.model.flows import expected_joins, one_loss_median, permutation_steps


@dataclass
class Prediction:
    """Modelled result of one collective call."""

    impl: str
    rank_finish_us: np.ndarray
    lower_bound_us: float
    info: dict = field(default_factory=dict)

    @property
    def time_us(self) -> float:
        """Completion time: the last rank's finish."""
        return float(self.rank_finish_us.max()) if self.rank_finish_us.size else 0.0

    @property
    def time_over_lb(self) -> float:
        return self.time_us / self.lower_bound_us if self.lower_bound_us > 0 else float("nan")


def check_traffic(traffic: np.ndarray, gpus_per_node: int) -> np.ndarray:
    """The traffic as int64, refused with one line if it is not a valid byte matrix."""
    a = np.asarray(traffic)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"traffic must be a square P x P matrix (got shape {a.shape})")
    if a.dtype.kind not in "iu":
        raise ValueError(f"traffic must hold integer bytes (got dtype {a.dtype})")
    if a.size and a.min() < 0:
        i, j = np.argwhere(a < 0)[0]
        raise ValueError(f"traffic[{i}][{j}] = {a[i, j]} is negative")
    if a.shape[0] % gpus_per_node:
        raise ValueError(f"{a.shape[0]} ranks is not a multiple of {gpus_per_node} GPUs per node")
    return a.astype(np.int64, copy=False)


def lower_bound(traffic: np.ndarray, fabric: Fabric) -> dict:
    """Bounds no algorithm can beat, in µs.

    ``scaleout_us``: the busiest server's cross-server bytes (sent or received) spread
    evenly over its G NICs — "bytes of the busiest NIC over its bandwidth" after perfect
    balancing. ``scaleup_us``: the busiest GPU's intra-server bytes over its scale-up port,
    or the largest intra-server pair over one peer link. ``lower_bound_us`` is the larger.
    """
    d = check_traffic(traffic, fabric.gpus_per_node)
    g = fabric.gpus_per_node
    s = d.shape[0] // g
    blocks = d.reshape(s, g, s, g).sum(axis=(1, 3))
    diag = np.diagonal(blocks).copy()
    cross_out = blocks.sum(axis=1) - diag
    cross_in = blocks.sum(axis=0) - diag
    nic_bytes = max(int(cross_out.max()), int(cross_in.max())) / g if s > 1 else 0.0
    intra = d.reshape(s, g, s, g)[np.arange(s), :, np.arange(s), :]  # (s, g, g)
    intra = intra * (1 - np.eye(g, dtype=np.int64))
    if g == 1:
        up_us = 0.0
    else:
        busiest = max(int(intra.sum(axis=2).max()), int(intra.sum(axis=1).max()))
        up_us = max(
            float(fabric.scaleup_time_us(float(busiest))),
            float(fabric.peer_time_us(float(intra.max()))),
        )
    out_us = float(fabric.nic_time_us(nic_bytes))
    return {
        "lower_bound_us": max(out_us, up_us),
        "scaleout_lb_us": out_us,
        "scaleup_lb_us": up_us,
        "busiest_nic_bytes": nic_bytes,
    }


def _bounds(traffic: np.ndarray, fabric: Fabric) -> tuple[np.ndarray, float, dict]:
    lb = lower_bound(traffic, fabric)
    return check_traffic(traffic, fabric.gpus_per_node), lb.pop("lower_bound_us"), lb


def fanout(traffic: np.ndarray, fabric: Fabric) -> Prediction:
    """Every send and receive posted at once."""
    d, lb, info = _bounds(traffic, fabric)
    p = d.shape[0]
    src, dst = np.nonzero(d)
    finish = step_finish(fabric, np.zeros(p), src, dst, d[src, dst])
    senders = np.bincount(
        dst[(src // fabric.gpus_per_node) != (dst // fabric.gpus_per_node)], minlength=p
    )
    info.update(steps=1, max_incast=int(senders.max()) if p else 0)
    return Prediction("fanout", finish, lb, info)


def _two_hop(name: str, traffic: np.ndarray, fabric: Fabric, relay_at_sender: bool):
    """Rail-aligned fan-out through a relay GPU (see the module docstring)."""
    d, lb, info = _bounds(traffic, fabric)
    p = d.shape[0]
    g = fabric.gpus_per_node
    s = p // g
    blocks = d.reshape(s, g, s, g)  # [src server, src local, dst server, dst local]
    cross = ~np.eye(s, dtype=bool)[:, None, :, None]
    remote = np.where(cross, blocks, 0)
    servers, local = np.arange(s), np.arange(g)
    if relay_at_sender:  # PXN: (s,i) -> (s,j) over scale-up, then (s,j) -> (t,j)
        up = remote.sum(axis=2)  # [s, i, j]
        up_src = servers[:, None, None] * g + local[None, :, None]
        up_dst = servers[:, None, None] * g + local[None, None, :]
        net = remote.sum(axis=1)  # [s, t, j]
        net_src = servers[:, None, None] * g + local[None, None, :]
        net_dst = servers[None, :, None] * g + local[None, None, :]
    else:  # DeepEP: (s,i) -> (t,i) over rail i, then (t,i) -> (t,j) over scale-up
        net = remote.sum(axis=3)  # [s, i, t]
        net_src = servers[:, None, None] * g + local[None, :, None]
        net_dst = servers[None, None, :] * g + local[None, :, None]
        up = remote.sum(axis=0)  # [i, t, j]
        up_src = servers[None, :, None] * g + local[:, None, None]
        up_dst = servers[None, :, None] * g + local[None, None, :]
    intra = np.where(~cross, blocks, 0)
    sv, iv, tv, jv = np.nonzero(intra)
    up_src, up_dst = (np.broadcast_to(a, up.shape).ravel() for a in (up_src, up_dst))
    net_src, net_dst = (np.broadcast_to(a, net.shape).ravel() for a in (net_src, net_dst))
    net = net.ravel()
    src = np.concatenate((up_src, net_src, sv * g + iv))
    dst = np.concatenate((up_dst, net_dst, tv * g + jv))
    nb = np.concatenate((up.ravel(), net, intra[sv, iv, tv, jv]))
    finish = step_finish(fabric, np.zeros(p), src, dst, nb)
    net_pairs = (net > 0) & (net_src // g != net_dst // g)
    senders = np.bincount(net_dst[net_pairs], minlength=p)
    info.update(steps=1, max_incast=int(senders.max()) if p else 0)
    return Prediction(name, finish, lb, info)


def pxn(traffic: np.ndarray, fabric: Fabric) -> Prediction:
    """PXN-like fan-out: forward over scale-up to the destination's rail, then send."""
    return _two_hop("pxn", traffic, fabric, relay_at_sender=True)


def deepep(traffic: np.ndarray, fabric: Fabric) -> Prediction:
    """DeepEP-like dispatch: send over the own rail, then forward over scale-up."""
    return _two_hop("deepep", traffic, fabric, relay_at_sender=False)


#: FAST schedule synthesis plus one rank's plan (what a rank computes per call), µs, by
#: GPU count (8 per server, ``zipf:0.8``): ``python -m commbench.benchmarks.scheduler`` on the
#: 2-core development machine, quiet, 2026-11-30 (after issue 18's speed-ups). Measured
#: once and kept here so the model's predictions do not move with the machine's load.
SYNTHESIS_US = {16: 17.0, 64: 34.0, 128: 70.0, 320: 361.0, 1024: 5910.0}


def synthesis_us(nranks: int) -> float:
    """Per-call schedule synthesis at ``nranks`` GPUs: :data:`SYNTHESIS_US` interpolated
    (and extrapolated) on log-log axes."""
    ps = np.log(np.array(sorted(SYNTHESIS_US), dtype=float))
    ts = np.log(np.array([SYNTHESIS_US[k] for k in sorted(SYNTHESIS_US)]))
    x = math.log(max(int(nranks), 2))
    i = int(np.clip(np.searchsorted(ps, x) - 1, 0, len(ps) - 2))
    slope = (ts[i + 1] - ts[i]) / (ps[i + 1] - ps[i])
    return float(math.exp(ts[i] + slope * (x - ps[i])))


def call_overhead_us(nranks: int, fabric: Fabric, synthesis_us: float) -> dict:
    """What one FAST call costs before its first step, in µs.

    ``allgather_us``: every rank's row of the traffic matrix (P int64 counts) to every
    rank by recursive doubling: ⌈log2 P⌉ messages of latency (``nic_us + msg_us`` once the
    job spans nodes) and (P - 1) rows through one NIC; ``synthesis_us``: the schedule's
    synthesis (the caller's, measured); ``call_us``: their sum.
    """
    p = int(nranks)
    if p <= 1:
        return {"allgather_us": 0.0, "synthesis_us": float(synthesis_us),
                "call_us": float(synthesis_us)}  # fmt: skip
    steps = math.ceil(math.log2(p))
    spans = p > fabric.gpus_per_node
    alpha = (fabric.nic_us + fabric.msg_us) if spans else fabric.scaleup_us
    rows = (p - 1) * p * 8
    move = fabric.nic_time_us(rows) if spans else fabric.scaleup_time_us(rows)
    gather = steps * alpha + float(move)
    return {
        "allgather_us": gather,
        "synthesis_us": float(synthesis_us),
        "call_us": gather + float(synthesis_us),
    }


def ompi_alltoallv_algorithm(nranks: int) -> str:
    """Open MPI's ``coll/tuned`` fixed choice for ``MPI_Alltoallv`` (it looks only at the
    communicator size): ``"basic_linear"`` (every Irecv/Isend posted at once) or
    ``"pairwise"`` (P - 1 exchanges with r + k / r - k)."""
    p = int(nranks)
    if p < 4 or 64 <= p < 128 or 256 <= p < 1024:
        return "pairwise"
    return "basic_linear"


def mpi(traffic: np.ndarray, fabric: Fabric) -> Prediction:
    """``MPI_Alltoallv`` as Open MPI's ``coll/tuned`` runs it by default: basic linear is
    :func:`fanout`'s one step, pairwise is :func:`spreadout`'s P - 1 steps."""
    algo = ompi_alltoallv_algorithm(np.asarray(traffic).shape[0])
    pred = fanout(traffic, fabric) if algo == "basic_linear" else spreadout(traffic, fabric)
    return Prediction("mpi", pred.rank_finish_us, pred.lower_bound_us, {**pred.info, "algo": algo})


def spreadout_steps(traffic: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spread-out's permutation steps of a P x P traffic matrix: ``(dst, nbytes)``, each
    (P - 1) x P, step k (from 0) sending rank r's bytes to ``(r + k + 1) mod P``."""
    d = np.asarray(traffic)
    p = d.shape[0]
    ranks = np.arange(p)
    shifts = (ranks[None, :] + np.arange(1, p)[:, None]) % p
    return shifts, d[ranks[None, :], shifts]


def spreadout(traffic: np.ndarray, fabric: Fabric) -> Prediction:
    """Shifted round-robin: step k sends to ``(r + k) mod P``. Where the fabric's sends
    return with bytes still on their way (``nic_send_buffer_bytes``), flow by flow
    (:func:`~commbench.kernels.model.flows.permutation_steps`; on a lossy fabric the
    expected slowest rank over the timeouts its flows joining busy ports pay, each with
    the measured chance of a port taking two senders,
    :func:`~commbench.kernels.model.flows.expected_joins`, or, where no chance is
    measured, the median call over where its one loss falls,
    :func:`~commbench.kernels.model.flows.one_loss_median`), else step by step."""
    d, lb, info = _bounds(traffic, fabric)
    p = d.shape[0]
    ranks = np.arange(p)
    shifts, nb = spreadout_steps(d)
    if fabric.nic_send_buffer_bytes > 0 and p > 1:
        if fabric.loss_timeout_us > 0:
            lossy = expected_joins if fabric.loss_late else one_loss_median
            ready, runs = lossy(fabric, shifts, nb)
            info.update(loss_positions=runs)
        else:
            ready = permutation_steps(fabric, shifts, nb)
    else:
        ready = np.zeros(p)
        for dst in shifts:
            ready = step_finish(fabric, ready, ranks, dst, d[ranks, dst])
    info.update(steps=max(p - 1, 0), flow_level=bool(fabric.nic_send_buffer_bytes > 0))
    return Prediction("spreadout", ready, lb, info)


# ------------------------------------------------------------------ FAST schedules


def _columns(transfers) -> dict[str, np.ndarray]:
    """The transfers table (DataFrame or structured array) as plain numpy columns."""
    need = ("phase", "stage", "src", "dst", "origin", "final", "nbytes")
    if hasattr(transfers, "columns"):
        names = list(transfers.columns)
    else:
        names = list(getattr(getattr(transfers, "dtype", None), "names", None) or ())
    missing = [c for c in need if c not in names]
    if missing:
        raise ValueError(f"transfers table lacks column(s) {', '.join(missing)}")
    cols = {c: np.asarray(transfers[c]) for c in need[1:]}
    raw = transfers["phase"]
    if hasattr(raw, "cat"):  # pandas categorical: map its few categories, not every row
        names, codes = np.asarray(raw.cat.categories).astype(str), raw.cat.codes.to_numpy()
    else:
        names, codes = np.unique(np.asarray(raw).astype(str), return_inverse=True)
    unknown = sorted(set(names) - set(PHASES))
    if unknown:
        raise ValueError(f"transfers table: unknown phase(s) {unknown}; expected {PHASES}")
    cols["phase"] = np.array([_CODE[n] for n in names], dtype=np.int64)[codes]
    for c in need[1:]:
        cols[c] = cols[c].astype(np.int64)
    return cols


_CODE = {name: i for i, name in enumerate(sorted(PHASES))}


def _stage_rows(cols: dict) -> tuple[np.ndarray, np.ndarray, int]:
    """Mask of stage rows, the execution position (0..K-1) of each row's stage (-1 when
    the row's stage has no rail transfer), and K."""
    is_stage = cols["phase"] == _CODE["stage"]
    stage = cols["stage"]
    if not is_stage.any():
        return is_stage, np.full(stage.size, -1, dtype=np.int64), 0
    if stage[is_stage].min() < 0:
        raise ValueError("transfers table: a stage row has a negative stage number")
    present = np.bincount(stage[is_stage]) > 0
    lookup = np.where(present, np.cumsum(present) - 1, -1)
    inside = (stage >= 0) & (stage < lookup.size)
    pos = np.full(stage.size, -1, dtype=np.int64)
    pos[inside] = lookup[stage[inside]]
    return is_stage, pos, int(present.sum())


def _pairs(src: np.ndarray, dst: np.ndarray, nb: np.ndarray, p: int, g: int):
    """Sum rows that share (src, dst): one message per pair.

    Rows inside a node and rail-aligned rows between nodes (all of FAST's) get a compact
    key (destination's local index, or G + destination node), summed with ``bincount``;
    anything else falls back to a sort.
    """
    cross = (src // g) != (dst // g)
    nbf = nb.astype(np.float64)
    if not (dst[cross] % g == src[cross] % g).all():
        uniq, inv = np.unique(src * p + dst, return_inverse=True)
        return uniq // p, uniq % p, np.bincount(inv, nbf, uniq.size)
    width = g + p // g
    key = src * width + np.where(cross, g + dst // g, dst % g)
    uniq = np.flatnonzero(np.bincount(key))
    total = np.bincount(key, nbf)[uniq]
    usrc, ucode = uniq // width, uniq % width
    udst = np.where(ucode < g, (usrc // g) * g + ucode, (ucode - g) * g + usrc % g)
    return usrc, udst, total


def _run_steps(
    fabric: Fabric, p: int, step, src, dst, nb, tail_nics: int | None = None
) -> tuple[np.ndarray, np.ndarray, list]:
    """Run the steps in increasing order (rows of one step are one grouped call;
    ``tail_nics`` as :func:`step_finish`'s).

    Returns the final per-rank times, the step numbers that had rows, and the makespan
    after each of them.
    """
    narrow = np.int16 if step.size and step.max() < np.iinfo(np.int16).max else np.int64
    order = np.argsort(step.astype(narrow), kind="stable")  # a radix sort for int16
    first = step.min() if step.size else 0
    counts = np.bincount(step - first) if step.size else np.zeros(0, dtype=np.int64)
    steps = np.flatnonzero(counts) + first
    bounds = np.concatenate(([0], np.cumsum(counts[counts > 0]))).tolist()
    ready = np.zeros(p)
    marks = []
    g = fabric.gpus_per_node
    for i in range(len(steps)):
        rows = order[bounds[i] : bounds[i + 1]]
        s_, d_, n_ = _pairs(src[rows], dst[rows], nb[rows], p, g)
        ready = step_finish(fabric, ready, s_, d_, n_, tail_nics=tail_nics)
        marks.append(float(ready.max()))
    return ready, steps, marks


def fast(
    traffic: np.ndarray,
    transfers,
    fabric: Fabric,
    *,
    balance: str | None = None,
) -> Prediction:
    """Model a FAST schedule from its ``transfers()`` table (see the module docstring)."""
    if balance is not None and balance not in BALANCE_MODES:
        raise ValueError(f"balance must be one of {', '.join(BALANCE_MODES)} (got {balance!r})")
    d, lb, info = _bounds(traffic, fabric)
    p = d.shape[0]
    cols = _columns(transfers)
    phase, src, dst, nb = cols["phase"], cols["src"], cols["dst"], cols["nbytes"]
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= p):
        raise ValueError(f"transfers table names a rank outside 0..{p - 1}")
    is_stage, pos, k = _stage_rows(cols)
    step = np.full(src.size, -1, dtype=np.int64)
    step[is_stage] = pos[is_stage] + 1
    step[phase == _CODE["intra"]] = 1
    is_tail = phase == _CODE["tail"]
    step[is_tail] = k + 1
    redist = phase == _CODE["redistribute"]
    from_tail = redist & (cols["stage"] < 0)
    if (pos[redist & ~from_tail] < 0).any():
        raise ValueError("transfers table: a redistribute row names a stage with no transfers")
    step[redist] = np.where(from_tail[redist], k + 2, pos[redist] + 2)
    is_bal = phase == _CODE["balance"]
    planned = balance is None and _has_step(transfers)
    if planned:
        step = np.asarray(transfers["step"]).astype(np.int64)
        if step.size and step.min() < 0:
            raise ValueError("transfers table: a negative step")
        xs, xd, xn, xstep = src, dst, nb, step
        k = int(step[is_stage].max(initial=0))  # the last rail stage's step
    elif balance in (None, "prologue"):
        step[is_bal] = 0
        keep = np.ones(src.size, dtype=bool)
        xs, xd, xn, xstep = src, dst, nb, step
    else:
        lent = (is_stage | is_tail) & (cols["origin"] != src)
        _check_lending(cols, is_bal, lent, p)
        keep = ~is_bal
        xs = np.concatenate((src[keep], cols["origin"][lent]))
        xd = np.concatenate((dst[keep], src[lent]))
        xn = np.concatenate((nb[keep], nb[lent]))
        xstep = np.concatenate((step[keep], step[lent] - 1))
    # a stage waits for its rail's slowest NIC, not the machine's: the cpu backend's rail
    # barrier (executor sync="rail") starts each stage where the rail's last has ended
    servers = p // fabric.gpus_per_node
    ready, steps_present, marks = _run_steps(fabric, p, xstep, xs, xd, xn, servers)
    prologue = marks[0] if steps_present.size and steps_present[0] == 0 else 0.0
    last_stage_idx = int(np.searchsorted(steps_present, k, side="right")) - 1
    if planned:
        k = int(np.unique(cols["stage"][is_stage]).size)
    stages_end = marks[last_stage_idx] if k else prologue
    tail_bytes = int(np.bincount(src[is_tail], nb[is_tail], p).max(initial=0)) if p else 0
    sched_bytes = _stage_bytes_per_nic(cols, is_stage, pos, k, p)
    info.update(
        stages=int(k),
        tail=bool(is_tail.any()),
        tail_nic_bytes=tail_bytes,
        balance=balance or ("plan" if planned else "prologue"),
        prologue_us=prologue,
        stages_us=stages_end - prologue,
        epilogue_us=float(ready.max()) - stages_end,
        stage_fixed_us=k * (fabric.stage_us + fabric.nic_us),
        scheduled_nic_bytes=sched_bytes,
        balance_bytes=int(nb[is_bal].sum()),
        redistribute_bytes=int(nb[redist].sum()),
    )
    return Prediction("fast", ready, lb, info)


def _has_step(transfers) -> bool:
    if hasattr(transfers, "columns"):
        return "step" in list(transfers.columns)
    return "step" in (getattr(getattr(transfers, "dtype", None), "names", None) or ())


def _stage_bytes_per_nic(cols, is_stage, pos, k: int, p: int) -> int:
    """Σ over stages of the largest bytes one NIC sends in that stage."""
    if not k:
        return 0
    key = pos[is_stage] * p + cols["src"][is_stage]
    per = np.bincount(key, cols["nbytes"][is_stage].astype(np.float64), k * p)
    return int(per.reshape(k, p).max(axis=1).sum())


def _check_lending(cols, is_bal, lent, p: int) -> None:
    """Pipelined balancing re-derives the balance moves from the stage rows: check it may."""
    bal = np.bincount(
        cols["origin"][is_bal] * p + cols["dst"][is_bal], cols["nbytes"][is_bal], p * p
    )
    need = np.bincount(cols["origin"][lent] * p + cols["src"][lent], cols["nbytes"][lent], p * p)
    direct = (cols["src"][is_bal] == cols["origin"][is_bal]).all()
    if not direct or not np.array_equal(bal, need):
        raise ValueError(
            "balance='pipelined' needs balance rows that move bytes straight from their "
            "origin to the GPU that sends them in a stage; this schedule does otherwise"
        )


def split_stages(transfers, max_stage_bytes: int):
    """What-if schedule: every stage whose busiest NIC sends more than ``max_stage_bytes``
    becomes ``ceil(w / max_stage_bytes)`` consecutive sub-stages with the same
    permutation, each row (and its redistribution) cut into equal integer parts.

    Still a valid FAST schedule (rail-aligned, one sender per receiving server per stage);
    more stages (fixed costs) but smaller steps to lend ahead of and to redistribute
    behind. Returns a pandas DataFrame like ``Schedule.transfers()``.
    """
    import pandas as pd

    if isinstance(max_stage_bytes, bool) or int(max_stage_bytes) != max_stage_bytes:
        raise ValueError(f"max_stage_bytes must be a whole number (got {max_stage_bytes!r})")
    if max_stage_bytes < 1:
        raise ValueError(f"max_stage_bytes must be >= 1 (got {max_stage_bytes})")
    cols = _columns(transfers)
    is_stage, pos, k = _stage_rows(cols)
    p = int(max(cols["src"].max(initial=0), cols["dst"].max(initial=0))) + 1
    key = pos[is_stage] * p + cols["src"][is_stage]
    per_nic = np.bincount(key, cols["nbytes"][is_stage], k * p).reshape(k, p)
    parts = np.maximum(1, -(-per_nic.max(axis=1, initial=0).astype(np.int64) // max_stage_bytes))
    first = np.concatenate(([0], np.cumsum(parts)[:-1]))
    cut = pos >= 0  # stage rows and the redistribution of stages
    m = np.ones(pos.size, dtype=np.int64)
    m[cut] = parts[pos[cut]]
    idx = np.repeat(np.arange(pos.size), m)
    j = np.arange(idx.size) - np.repeat(np.cumsum(m) - m, m)
    nb, mm = cols["nbytes"][idx], m[idx]
    out = {c: cols[c][idx] for c in ("src", "dst", "origin", "final")}
    out["nbytes"] = nb // mm + np.where(j == mm - 1, nb % mm, 0)
    out["stage"] = np.where(cut[idx], first[np.maximum(pos[idx], 0)] + j, cols["stage"][idx])
    names = sorted(PHASES)
    frame = pd.DataFrame(out)
    frame.insert(0, "phase", pd.Categorical.from_codes(cols["phase"][idx], categories=names))
    return frame[["phase", "stage", "src", "dst", "origin", "final", "nbytes"]]


def balance_only(traffic: np.ndarray, transfers, fabric: Fabric) -> Prediction:
    """The FAST schedule's balancing, then every rail transfer at once, then redistribution."""
    d, lb, info = _bounds(traffic, fabric)
    p = d.shape[0]
    cols = _columns(transfers)
    phase = cols["phase"]
    # rail rows (stages and tail) all go at once in step 1
    step = np.select([phase == _CODE["balance"], phase == _CODE["redistribute"]], [0, 2], default=1)
    ready, _, _ = _run_steps(fabric, p, step, cols["src"], cols["dst"], cols["nbytes"])
    rail = (phase == _CODE["stage"]) | (phase == _CODE["tail"])
    pairs = np.unique(cols["src"][rail] * p + cols["dst"][rail])
    senders = np.bincount(pairs % p, minlength=p)
    info.update(steps=3, max_incast=int(senders.max()) if p else 0)
    return Prediction("balance-only", ready, lb, info)
