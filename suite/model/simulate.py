"""The cost model's predictions as result records (what ``commbench simulate`` writes).

Fabric constants come from the system profile's ``[fabric]`` table
(``jobs/systems/NAME.toml``, loaded by :func:`commbench.jobs.profile.load_profile`) and can be
overridden. Records have the measured records' schema with ``backend = "model"``,
``modelled = true`` and the constants used in ``fabric``.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import sys
import time

import numpy as np

from commbench import __version__
from commbench.analysis.intervals import exact_interval
from commbench.analysis.tiers import record_tiers
from commbench.errors import UsageError
from commbench.harness import metrics, results
from commbench.kernels.model import Fabric
from commbench.kernels.model import allreduce as ar_model
from commbench.kernels.model import alltoallv as a2a_model
from commbench.kernels.model import collectives as coll_model
from commbench.kernels.model import tune as tune_model
from commbench.units import format_size

ALLTOALLV_IMPLS = ("fast", "fanout", "spreadout", "balance-only", "pxn", "deepep", "mpi",
                   "fast+sched")  # fmt: skip
ALLREDUCE_IMPLS = ar_model.ALGORITHMS
#: all-gather, reduce-scatter, broadcast: the algorithms modelled for each
BLOCK_IMPLS = coll_model.ALGORITHMS
#: NVRAR's LL8 cells on the cpu backend: 4 payload bytes per 8-byte cell
#: (``kernels/nvrar/cells.py``), put by MPI at the NIC's rate
CPU_LL8_SHARE = 0.5
#: command-line flag -> Fabric field
OVERRIDES = {
    "nic_GBps": "nic_GBps",
    "nic_us": "nic_us",
    "scaleup_GBps": "scaleup_GBps",
    "scaleup_peer_GBps": "scaleup_peer_GBps",
    "scaleup_us": "scaleup_us",
    "stage_us": "stage_us",
    "msg_us": "msg_us",
    "incast": "incast",
    "reduce_GBps": "reduce_GBps",
    "proxy_us": "proxy_us",
    "put_us": "put_us",
    "switch_buffer_MB": "switch_buffer_MB",
    "loss_timeout_us": "loss_timeout_us",
    "calls_averaged": "calls_averaged",
}


def fabric_from_profile(
    name: str,
    gpus_per_node: int | None = None,
    flow_control: str | None = None,
    **overrides: float | None,
) -> Fabric:
    """The cost-model :class:`Fabric` of system ``name`` (a shipped name or a profile
    file ``PATH.toml``): its profile's ``[fabric]`` for
    ``gpus_per_node`` GPUs per node (default: the profile's) and ``flow_control``, with
    overrides applied (:meth:`commbench.kernels.model.fabric_table.FabricTable.per_gpu`)."""
    from commbench.jobs.profile import load_system

    profile = load_system(name)
    g = gpus_per_node
    if g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 1):
        raise UsageError(f"--gpus-per-node must be an integer >= 1 (got {g!r})")
    try:
        fabric = profile.fabric.per_gpu(profile.devices.gpus_per_node, g, flow_control, **overrides)
        if profile.devices.backend == "cpu":  # NVRAR's cells move through MPI puts
            fabric = fabric.with_(ll8_share=CPU_LL8_SHARE)
        return fabric
    except ValueError as exc:
        raise UsageError(f"system {name!r}: {exc}") from None


def _fabric_record(fabric: Fabric) -> dict:
    return {k: (None if isinstance(v, float) and math.isinf(v) else v)
            for k, v in dataclasses.asdict(fabric).items()}  # fmt: skip


# ---------------------------------------------------------------- evaluation


@dataclasses.dataclass
class Point:
    nodes: int
    size: int
    workload: str | None
    impl: str
    prediction: a2a_model.Prediction
    metric_bytes: int
    count: int
    seed: int | None = None
    extra: dict = dataclasses.field(default_factory=dict)
    #: FAST's tuner rows (every candidate tried); records keep only a summary of them.
    candidates: list[dict] | None = None
    #: all-to-allv: the traffic matrix and (FAST, balance-only) the schedule's transfers,
    #: for where the bytes went (the record's ``tiers``)
    traffic: np.ndarray | None = None
    transfers: object = None


def alltoallv_points(
    fabric: Fabric,
    nodes_list: list[int],
    sizes: list[int],
    workloads: list[str],
    impls: list[str],
    seed: int,
    unit: int = 1,
    params: dict | None = None,
    tune: bool = True,
    call_costs: bool = True,
    progress: bool = False,
):
    """Yield one :class:`Point` per (nodes, workload, size, impl).

    FAST's options: ``params`` plus the fabric's stage cost; with ``tune`` the model also
    tries the option sets :func:`commbench.kernels.model.tune.tune_fast` searches (a grid, then a
    coordinate descent; never varying a key of ``params``) and keeps the fastest.
    balance-only uses the untuned schedule. With ``call_costs`` FAST's times include
    what a call costs before its first step (:func:`commbench.kernels.model.alltoallv.
    call_overhead_us`, with the measured synthesis law ``synthesis_us``). ``progress``:
    report the tuner's candidates on stderr as it goes.
    """
    from commbench.harness.workloads import generate, parse_workload

    g = fabric.gpus_per_node
    for nodes in nodes_list:
        p = nodes * g
        for workload in workloads:
            w = parse_workload(workload)
            wseed = w.seed if w.seed is not None else seed
            for size in sizes:
                traffic = generate(w, p, size, seed=wseed, unit=unit)
                metric = metrics.alltoallv_metric_bytes(traffic)
                tuned = None
                for impl in impls:
                    t0 = time.perf_counter()
                    extra: dict = {}
                    candidates = transfers = None
                    if impl in ("fast", "fast+sched", "balance-only") and tuned is None:
                        report = _progress_printer(nodes, workload, size) if progress else None
                        tuned = fast_schedule(traffic, fabric, unit, params or {},
                                              tune and ("fast" in impls or "fast+sched" in impls),
                                              report)  # fmt: skip
                        if report is not None:
                            sys.stderr.write("\r\033[K")  # clear the progress line
                    if impl in ("fast", "fast+sched"):
                        pred, transfers = tuned.prediction, tuned.transfers
                        extra = _schedule_info(tuned, tune)
                        extra["synthesis_warm_us"] = warm_synthesis_us(
                            traffic, g, unit, tuned.options
                        )
                        candidates = tuned.candidates if tune else None
                        # fast+sched makes its schedule inside every call: always paid
                        if call_costs or impl == "fast+sched":
                            pred, extra["call"] = _with_call_costs(pred, p, fabric)
                            pred = dataclasses.replace(pred, impl=impl)
                    elif impl == "balance-only":
                        transfers = tuned.default_transfers
                        pred = a2a_model.balance_only(traffic, transfers, fabric)
                    else:
                        pred = _BASELINES[impl](traffic, fabric)
                    extra["model_seconds"] = time.perf_counter() - t0
                    yield Point(
                        nodes,
                        size,
                        workload,
                        impl,
                        pred,
                        metric,
                        size // unit,
                        wseed,
                        extra,
                        candidates,
                        traffic,
                        transfers,
                    )


_BASELINES = {
    "fanout": a2a_model.fanout,
    "spreadout": a2a_model.spreadout,
    "pxn": a2a_model.pxn,
    "deepep": a2a_model.deepep,
    "mpi": a2a_model.mpi,
}


def _with_call_costs(pred: a2a_model.Prediction, nranks: int, fabric: Fabric):
    """FAST's prediction with the per-call fixed costs in front of its first step."""
    call = a2a_model.call_overhead_us(nranks, fabric, a2a_model.synthesis_us(nranks))
    info = {**pred.info, "schedule_time_over_lb": pred.time_over_lb}
    shifted = dataclasses.replace(
        pred, rank_finish_us=pred.rank_finish_us + call["call_us"], info=info
    )
    return shifted, call


def _progress_printer(nodes: int, workload: str, size: int):
    """A tuner callback that rewrites one stderr line (a terminal's progress line)."""
    t0 = time.perf_counter()

    def report(evaluated: int, best: float) -> None:
        sys.stderr.write(
            f"\r# tuning FAST: {nodes} nodes, {workload}, {format_size(size)}: "
            f"{evaluated} candidates, best {best:.3f} x lb, {time.perf_counter() - t0:.0f} s "
        )
        sys.stderr.flush()

    return report


def fast_schedule(
    traffic: np.ndarray,
    fabric: Fabric,
    unit: int,
    params: dict,
    tune: bool = True,
    progress=None,
) -> tune_model.Tuned:
    """The FAST schedule the model evaluates: ``params`` + the fabric's stage cost, or
    (``tune``) the fastest of the model's candidates around them."""
    opts = {k: None if str(v).lower() == "none" else v for k, v in params.items()}
    try:
        return tune_model.tune_fast(
            traffic,
            fabric.gpus_per_node,
            fabric,
            unit=unit,
            fixed=opts,
            candidates=None if tune else [tune_model.default_options(fabric, opts)],
            progress=progress,
        )
    except TypeError as exc:
        raise UsageError(f"--param: {exc}") from None


#: Calls of the winning options timed again for ``synthesis_warm_us``.
WARM_REPEATS = 9


def warm_synthesis_us(traffic: np.ndarray, g: int, unit: int, options: dict) -> float:
    """The median of :data:`WARM_REPEATS` back-to-back ``schedule()`` calls with ``options``
    on ``traffic``, µs, each timed whole as the scheduler benchmark times its medians: the
    synthesis time warm. ``info.synthesis_us`` is the one call the tuner timed (cold: the
    first call with these options, timed inside the scheduler), 1.2-3x this at 64 GPUs."""
    import commbench.kernels.fast

    times = []
    for _ in range(WARM_REPEATS):
        t0 = time.perf_counter()
        commbench.kernels.fast.schedule(traffic, g, unit=unit, **options)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def _schedule_info(tuned: tune_model.Tuned, tune: bool) -> dict:
    sched = tuned.schedule
    s = sched.summary()
    return {
        "tuned": tune,
        "options": tuned.options,
        "default_time_us": tuned.default_time_us,
        "tuning": {
            "candidates": len(tuned.candidates) if tune else 0,
            "passes": tuned.passes,
            "best_time_us": tuned.prediction.time_us,
            "default_time_us": tuned.default_time_us,
        },
        "strategy": s["strategy"],
        "synthesis_us": s["synthesis_us"],
        "scheduled_bytes": s["scheduled_bytes"],
        "lower_bound_bytes": s["lower_bound_bytes"],
        "tail_fraction": s["tail_fraction"],
        "stage_cost_bytes": sched.stage_cost_bytes,
        "max_stages": sched.max_stages,
        "quantum_bytes": sched.quantum,
        "tail_penalty": sched.tail_penalty,
        "max_stage_bytes": sched.max_stage_bytes,
        "balance_mode": sched.balance,
    }


def allreduce_points(
    fabric: Fabric,
    nodes_list: list[int],
    sizes: list[int],
    impls: list[str],
    itemsize: int,
    after_rest: bool = False,
):
    """One :class:`Point` per (nodes, size, impl): a call of the timed loop, or with
    ``after_rest`` the first call after a rest (:func:`ar_model.predict`)."""
    call = "after a rest" if after_rest else "timed loop"
    for nodes in nodes_list:
        for size in sizes:
            if size % itemsize:
                raise UsageError(
                    f"size {size} is not a multiple of the {itemsize}-byte element: "
                    "choose -b/-e/--size so every size is"
                )
            for impl in impls:
                t0 = time.perf_counter()
                pred = ar_model.predict(impl, size, nodes, fabric, after_rest=after_rest)
                extra = {"model_seconds": time.perf_counter() - t0, "call": call}
                yield Point(nodes, size, None, impl, pred, size, size // itemsize, None, extra)


def block_points(
    fabric: Fabric,
    collective: str,
    nodes_list: list[int],
    sizes: list[int],
    impls: list[str],
    itemsize: int,
    chunk_bytes: int | None = None,
):
    """One :class:`Point` per (nodes, size, impl) of all-gather, reduce-scatter or
    broadcast (nccl-tests' size; ``count`` is the per-rank block, as nccl-tests prints it,
    or the buffer for broadcast)."""
    for nodes in nodes_list:
        p = nodes * fabric.gpus_per_node
        for size in sizes:
            if size % itemsize:
                raise UsageError(
                    f"size {size} is not a multiple of the {itemsize}-byte element: "
                    "choose -b/-e/--size so every size is"
                )
            count = size // itemsize if collective == "broadcast" else size // itemsize // p
            for impl in impls:
                t0 = time.perf_counter()
                try:
                    pred = coll_model.predict(collective, impl, size, nodes, fabric, chunk_bytes)
                except ValueError as exc:
                    raise UsageError(f"{impl} on {nodes} nodes: {exc}") from None
                extra = {"model_seconds": time.perf_counter() - t0}
                yield Point(nodes, size, None, impl, pred, size, count, None, extra)


# ---------------------------------------------------------------- records


def make_record(static: dict, point: Point, index: int, fabric: Fabric) -> dict:
    """One result record, the measured records' schema (see :mod:`commbench.harness.driver`)."""
    pred = point.prediction
    g = fabric.gpus_per_node
    nranks = point.nodes * g
    finish = np.asarray(pred.rank_finish_us, dtype=float)
    rec = dict(static)
    rec.update(
        nodes=point.nodes,
        gpus_per_node=g,
        nranks=nranks,
        impl=point.impl,
        size_bytes=point.size,
        workload=point.workload,
        seed=point.seed,
        timestamp=results.timestamp(),
        point=index,
        count=point.count,
        metric_bytes=point.metric_bytes,
    )
    rec.update(metrics.summarise(finish))
    shown = metrics.reduce_times(finish, static["time_reduction"])
    factor = metrics.busbw_factor(static["collective"], nranks) if nranks > 1 else 0.0
    algbw = metrics.algbw_GBps(point.metric_bytes, shown)
    info = {
        "lower_bound_us": pred.lower_bound_us,
        "time_over_lb": pred.time_over_lb if pred.lower_bound_us > 0 else None,
        **pred.info,
        **point.extra,
    }
    rec.update(
        time_us=shown,
        algbw_GBps=algbw,
        busbw_GBps=algbw * factor,
        busbw_factor=factor,
        nwrong=0,
        rank_time_us=finish.tolist(),
        rank_finish_us=finish.tolist(),
        info=info,
    )
    rec.update(exact_interval(shown).fields())
    rec["tiers"] = record_tiers(rec, point.traffic, point.transfers)
    return rec


def _flow_control(args) -> str | None:
    """``--flow-control``, else the profile's (None where it names none)."""
    if getattr(args, "flow_control", None):
        return args.flow_control
    from commbench.jobs.profile import load_system

    return load_system(args.system).fabric.flow_control


def static_fields(args, fabric: Fabric, dtype: np.dtype, reduction: str, params: dict) -> dict:
    from commbench.kernels.dtypes import dtype_name

    return {
        "run_id": results.new_run_id(),
        "git_sha": results.git_sha(),
        "system": args.system,
        "hostnames": [],
        "backend": "model",
        "collective": args.collective,
        "params": params,
        "dtype": dtype_name(dtype),
        "op": "sum" if args.collective in ("allreduce", "reducescatter") else None,
        "timing_mode": "model",
        "iters": 1,
        "warmup": 0,
        "graph_iters": 0,
        "time_reduction": reduction,
        "modelled": True,
        "fabric": _fabric_record(fabric),
        "flow_control": _flow_control(args),
        "versions": {
            "commbench": __version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "env": {},
    }
