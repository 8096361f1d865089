"""``commbench simulate``: the cost model's predictions, as records and a table.

Examples::

    commbench simulate alltoallv --system h200 --servers 2,4,8,16,40 --workload zipf:0.8 \\
        --size 64M --impls fast,fanout,spreadout,balance-only
    commbench simulate allreduce --system perlmutter --nodes 2,4,8,16,32 -b 64K -e 2M \\
        --impls nvrar,ring,recursive-doubling,nccl

Fabric constants come from the system profile's ``[fabric]`` table
(``jobs/systems/NAME.toml``, loaded by :func:`commbench.jobs.render.load_profile`) and can be
overridden on the command line. Records have the measured records' schema with
``backend = "model"``, ``modelled = true`` and the constants used in ``fabric``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import platform
import sys
import time

import numpy as np

from commbench import __version__
from commbench.errors import UsageError
from commbench.harness import metrics, results
from commbench.harness.workloads import DEFAULT_SEED
from commbench.kernels.model import Fabric
from commbench.kernels.model import allreduce as ar_model
from commbench.kernels.model import alltoallv as a2a_model
from commbench.kernels.model import tune as tune_model
from commbench.units import format_size, parse_size, size_sweep

ALLTOALLV_IMPLS = ("fast", "fanout", "spreadout", "balance-only", "pxn", "deepep")
ALLREDUCE_IMPLS = ar_model.ALGORITHMS
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
}
#: optional profile ``[fabric]`` keys read when present (else the Fabric default)
_OPTIONAL_PROFILE_KEYS = ("msg_us", "reduce_GBps", "proxy_us", "put_us", "switch_buffer_MB")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="predict collective times on a modelled cluster (cost model, no MPI)",
        description="Evaluate the two-tier cost model for all-to-allv patterns or "
        "all-reduce algorithms on a system profile's fabric; print a table and "
        "optionally append JSONL records marked modelled.",
    )
    p.add_argument("collective", choices=("alltoallv", "allreduce"))
    p.add_argument("--system", required=True, help="profile in jobs/systems (h200, ...)")
    p.add_argument(
        "--servers",
        "--nodes",
        dest="nodes",
        default=None,
        help="node (server) counts, comma-separated (default 2,4,8)",
    )
    p.add_argument("--gpus-per-node", type=int, default=None, help="override the profile's G")
    p.add_argument("--size", default=None, help="sizes, comma-separated (K/M/G suffixes)")
    p.add_argument("-b", "--minbytes", default=None, help="smallest size of a sweep")
    p.add_argument("-e", "--maxbytes", default=None, help="largest size of a sweep")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="sweep factor")
    p.add_argument("--impls", default=None, help="implementations, comma-separated")
    p.add_argument("--workload", default="zipf:0.8", help="all-to-allv traffic (lists sweep)")
    p.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="workload seed (a spec's @SEED wins)"
    )
    p.add_argument("-d", "--datatype", default=None, help="element type (bf16 for all-reduce)")
    p.add_argument(
        "-a", "--average", type=int, default=None, help="time shown: 0 rank0, 1 avg, 2 min, 3 max"
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="FAST scheduler option (strategy, quantum, max_stages, stage_cost_bytes, ...)",
    )
    p.add_argument(
        "--balance",
        choices=a2a_model.BALANCE_MODES,
        default=None,
        help="FAST scheduler's balancing (default: the scheduler's, pipelined); the model "
        "runs every row in the step its plan does",
    )
    p.add_argument(
        "--no-tune",
        dest="tune",
        action="store_false",
        help="FAST: use the scheduler's defaults (+ the fabric's stage cost and any --param) "
        "instead of the fastest of a few candidate option sets by the model",
    )
    g = p.add_argument_group("fabric overrides (default: the profile)")
    g.add_argument("--nic-GBps", dest="nic_GBps", type=float, help="NIC payload GB/s per GPU")
    g.add_argument(
        "--nic-us", "--alpha-us", dest="nic_us", type=float, help="scale-out latency per message"
    )
    g.add_argument("--scaleup-GBps", dest="scaleup_GBps", type=float, help="scale-up port GB/s")
    g.add_argument(
        "--scaleup-peer-GBps", dest="scaleup_peer_GBps", type=float, help="one peer link GB/s"
    )
    g.add_argument("--scaleup-us", dest="scaleup_us", type=float, help="scale-up latency")
    g.add_argument(
        "--stage-us", dest="stage_us", type=float, help="fixed cost per step/stage (launch, sync)"
    )
    g.add_argument("--msg-us", dest="msg_us", type=float, help="posting cost per message")
    g.add_argument(
        "--incast",
        type=float,
        help="incast loss per extra sender on the bytes beyond the switch buffer: k senders "
        "into a NIC take (1 + incast (k-1) overflow) times as long",
    )
    g.add_argument("--reduce-GBps", dest="reduce_GBps", type=float, help="reduction GB/s")
    g.add_argument(
        "--proxy-us", dest="proxy_us", type=float, help="NCCL/RCCL network proxy pass (us)"
    )
    g.add_argument("--put-us", dest="put_us", type=float, help="NVSHMEM put via its transport")
    g.add_argument(
        "--switch-buffer-MB",
        dest="switch_buffer_MB",
        type=float,
        help="switch buffer per receiving port before incast costs (0: from the first byte)",
    )
    g.add_argument(
        "--flow-control",
        choices=("lossless", "lossy"),
        default=None,
        help="which of the profile's incast cases (incast_lossless / incast_lossy) to use "
        "(default: the profile's flow_control; --incast overrides the coefficient)",
    )
    p.add_argument(
        "--no-call-costs",
        dest="call_costs",
        action="store_false",
        help="FAST: leave out the per-call fixed costs (matrix all-gather, synthesis)",
    )
    p.add_argument("--out", default=None, help="append JSONL records here")
    p.add_argument(
        "--keep-tuning",
        action="store_true",
        help="FAST: also write the tuner's every candidate (options, time, stages) to the raw "
        "side file <out>.raw.jsonl (records keep a short tuning summary)",
    )
    p.set_defaults(func=run)


# ---------------------------------------------------------------- fabric


def fabric_from_profile(
    name: str,
    gpus_per_node: int | None = None,
    flow_control: str | None = None,
    **overrides,
) -> Fabric:
    """The cost-model :class:`Fabric` of profile ``name``, with overrides applied.

    The profile gives ``scaleout_GBps`` per NIC and ``nics_per_node`` NICs; the model has
    one NIC per GPU, so a GPU's share is ``scaleout_GBps * nics_per_node / gpus_per_node``.
    With one GPU per node there is no scale-up tier (its constants are not used).
    ``incast`` is the profile's ``incast_<flow_control>`` (default: its ``flow_control``).
    """
    from commbench.jobs.render import load_profile

    profile = load_profile(name)
    f = profile.fabric
    g_profile = profile.gpus_per_node
    g = g_profile if gpus_per_node is None else gpus_per_node
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise UsageError(f"--gpus-per-node must be an integer >= 1 (got {g!r})")
    up, peer = f.scaleup_GBps, f.scaleup_peer_GBps
    if g == 1 and not up:
        up = peer = math.inf
    values = {
        "gpus_per_node": g,
        "nic_GBps": f.scaleout_GBps * f.nics_per_node / g_profile,
        "nic_us": f.scaleout_latency_us,
        "scaleup_GBps": up,
        "scaleup_peer_GBps": peer,
        "scaleup_us": f.scaleup_latency_us,
        "stage_us": f.stage_cost_us,
    }
    for key in _OPTIONAL_PROFILE_KEYS:
        if getattr(f, key, None) is not None:
            values[key] = getattr(f, key)
    if getattr(f, "nccl_ll128", None) is not None:
        values["nccl_ll128"] = f.nccl_ll128
    case = flow_control or getattr(f, "flow_control", None)
    if case is not None:
        coefficient = getattr(f, f"incast_{case}", None)
        if coefficient is None:
            raise UsageError(
                f"system {name!r} has no incast_{case} in its [fabric]: add it (with its "
                "source) or choose the other --flow-control"
            )
        values["incast"] = coefficient
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Fabric(**values)
    except ValueError as exc:
        raise UsageError(f"system {name!r}: {exc}") from None


def _fabric_record(fabric: Fabric) -> dict:
    return {k: (None if isinstance(v, float) and math.isinf(v) else v)
            for k, v in dataclasses.asdict(fabric).items()}  # fmt: skip


# ---------------------------------------------------------------- arguments


def _int_list(text: str, what: str) -> list[int]:
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{what} takes integers separated by commas (got {text!r})") from None
    if not vals or min(vals) < 1:
        raise UsageError(f"{what} must be integers >= 1 (got {text!r})")
    return vals


def _sizes(args) -> list[int]:
    if args.size is not None:
        if args.minbytes or args.maxbytes:
            raise UsageError("give either --size LIST or -b/-e, not both")
        sizes = [parse_size(s.strip()) for s in args.size.split(",") if s.strip()]
        if not sizes:
            raise UsageError("--size needs at least one size")
        return sizes
    default = "64M" if args.collective == "alltoallv" else "64K"
    lo = parse_size(args.minbytes or args.maxbytes or default)
    hi = parse_size(args.maxbytes or args.minbytes or default)
    return size_sweep(lo, hi, args.stepfactor)


def _impls(args, known: tuple[str, ...]) -> list[str]:
    names = [s.strip() for s in (args.impls or ",".join(known)).split(",") if s.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise UsageError(
            f"unknown implementation {bad[0] if bad else ''!r} for {args.collective}: "
            f"choose from {', '.join(known)}"
        )
    return names


def _dtype(args) -> np.dtype:
    from commbench.harness.backends.dtypes import parse_dtype

    return parse_dtype(args.datatype or ("bf16" if args.collective == "allreduce" else "uint8"))


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
                    candidates = None
                    if impl in ("fast", "balance-only") and tuned is None:
                        report = _progress_printer(nodes, workload, size) if progress else None
                        tuned = fast_schedule(
                            traffic, fabric, unit, params or {}, tune and "fast" in impls, report
                        )
                        if report is not None:
                            sys.stderr.write("\r\033[K")  # clear the progress line
                    if impl == "fast":
                        pred = tuned.prediction
                        extra = _schedule_info(tuned, tune)
                        candidates = tuned.candidates if tune else None
                        if call_costs:
                            pred, extra["call"] = _with_call_costs(pred, p, fabric)
                    elif impl == "balance-only":
                        pred = a2a_model.balance_only(traffic, tuned.default_transfers, fabric)
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
                    )


_BASELINES = {
    "fanout": a2a_model.fanout,
    "spreadout": a2a_model.spreadout,
    "pxn": a2a_model.pxn,
    "deepep": a2a_model.deepep,
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
    default = {"stage_cost_bytes": fabric.stage_cost_bytes, **opts}
    try:
        return tune_model.tune_fast(
            traffic,
            fabric.gpus_per_node,
            fabric,
            unit=unit,
            fixed=opts,
            candidates=None if tune else [default],
            progress=progress,
        )
    except TypeError as exc:
        raise UsageError(f"--param: {exc}") from None


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
    fabric: Fabric, nodes_list: list[int], sizes: list[int], impls: list[str], itemsize: int
):
    for nodes in nodes_list:
        for size in sizes:
            if size % itemsize:
                raise UsageError(
                    f"size {size} is not a multiple of the {itemsize}-byte element: "
                    "choose -b/-e/--size so every size is"
                )
            for impl in impls:
                t0 = time.perf_counter()
                pred = ar_model.predict(impl, size, nodes, fabric)
                extra = {"model_seconds": time.perf_counter() - t0}
                yield Point(nodes, size, None, impl, pred, size, size // itemsize, None, extra)


# ---------------------------------------------------------------- records and table


def make_record(static: dict, point: Point, index: int, fabric: Fabric) -> dict:
    """One result record, the measured records' schema (see suite/driver.py)."""
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
    return rec


def _static(args, fabric: Fabric, dtype: np.dtype, reduction: str, params: dict) -> dict:
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
        "op": "sum" if args.collective == "allreduce" else None,
        "timing_mode": "model",
        "iters": 1,
        "warmup": 0,
        "graph_iters": 0,
        "time_reduction": reduction,
        "modelled": True,
        "fabric": _fabric_record(fabric),
        "versions": {
            "commbench": __version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "env": {},
    }


def _print_header(args, fabric: Fabric, reduction: str) -> None:
    f = fabric
    print(f"# commbench {__version__} simulate {args.collective}: MODELLED on system "
          f"{args.system!r} (cost model, not a measurement)")  # fmt: skip
    print(
        f"#  G {f.gpus_per_node}  NIC {f.nic_GBps:g} GB/s alpha {f.nic_us:g} us  "
        f"scale-up {f.scaleup_GBps:g} GB/s (peer {f.scaleup_peer_GBps:g}) "
        f"alpha {f.scaleup_us:g} us  stage {f.stage_us:g} us  msg {f.msg_us:g} us  "
        f"incast {f.incast:g} (buffer {f.switch_buffer_MB:g} MB)  reduce {f.reduce_GBps:g} GB/s  "
        f"proxy {f.proxy_us:g} us  put {f.put_us:g} us"
    )
    if args.collective == "alltoallv":
        print("#  algbw = busiest rank's max(send, recv) bytes / time; "
              f"time = {reduction} over ranks; lb = busiest NIC's bytes / bandwidth")  # fmt: skip
        print(f"# {'nodes':>5s} {'ranks':>5s} {'size':>6s} {'workload':>12s} {'impl':>13s} "
              f"{'time(us)':>11s} {'algbw':>8s} {'busbw':>8s} {'lb(us)':>10s} {'t/lb':>6s} "
              f"{'stages':>6s}")  # fmt: skip
    else:
        print(f"#  algbw = size / time; time = {reduction} over ranks; "
              "lb = 2(N-1)/N bytes per node over its NICs")  # fmt: skip
        print(f"# {'nodes':>5s} {'ranks':>5s} {'size':>6s} {'count':>9s} {'impl':>19s} "
              f"{'time(us)':>11s} {'algbw':>8s} {'busbw':>8s} {'lb(us)':>10s} {'t/lb':>6s} "
              f"{'note':>6s}")  # fmt: skip


def _print_row(rec: dict, best: bool) -> None:
    info = rec["info"]
    tlb = info.get("time_over_lb")
    tlb_s = f"{tlb:6.3f}" if tlb is not None else f"{'-':>6s}"
    mark = "*" if best else " "
    head = f"  {rec['nodes']:5d} {rec['nranks']:5d} {format_size(rec['size_bytes']):>6s}"
    tail = (f"{rec['time_us']:11.2f} {rec['algbw_GBps']:8.3f} {rec['busbw_GBps']:8.3f} "
            f"{info['lower_bound_us']:10.2f} {tlb_s}")  # fmt: skip
    if rec["collective"] == "alltoallv":
        stages = info.get("stages", info.get("steps", ""))
        print(f"{head} {str(rec['workload'])[:12]:>12s} {rec['impl'] + mark:>13s} {tail} "
              f"{stages!s:>6s}")  # fmt: skip
    else:
        print(f"{head} {rec['count']:9d} {rec['impl'] + mark:>19s} {tail} "
              f"{info.get('algo', ''):>6s}")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from commbench.harness.collectives import DEFAULT_TIME_REDUCTION
    from commbench.harness.driver import parse_params

    overrides = {field: getattr(args, flag) for flag, field in OVERRIDES.items()}
    fabric = fabric_from_profile(args.system, args.gpus_per_node, args.flow_control, **overrides)
    nodes_list = _int_list(args.nodes or "2,4,8", "--servers/--nodes")
    sizes = _sizes(args)
    dtype = _dtype(args)
    average = args.average if args.average is not None else DEFAULT_TIME_REDUCTION[args.collective]
    if average not in metrics.TIME_REDUCTIONS:
        raise UsageError(f"-a takes 0 (rank 0), 1 (avg), 2 (min) or 3 (max), not {average}")
    reduction = metrics.TIME_REDUCTIONS[average]
    params = parse_params(args.param)
    if args.balance is not None:
        if args.collective != "alltoallv":
            raise UsageError("--balance applies to the FAST scheduler (alltoallv) only")
        if params.get("balance", args.balance) != args.balance:
            raise UsageError("--balance and --param balance=... disagree: give one of them")
        params["balance"] = args.balance
    if args.collective == "alltoallv":
        from commbench.harness.workloads import expand_workloads

        impls = _impls(args, ALLTOALLV_IMPLS)
        workloads = expand_workloads(args.workload)
        points = alltoallv_points(
            fabric,
            nodes_list,
            sizes,
            workloads,
            impls,
            args.seed,
            dtype.itemsize,
            params,
            args.tune,
            args.call_costs,
            progress=args.tune and "fast" in impls and sys.stderr.isatty(),
        )
    else:
        if args.param:
            raise UsageError("--param applies to the FAST scheduler (alltoallv) only")
        impls = _impls(args, ALLREDUCE_IMPLS)
        points = allreduce_points(fabric, nodes_list, sizes, impls, dtype.itemsize)
    static = _static(args, fabric, dtype, reduction, params)
    if args.keep_tuning and not args.out:
        raise UsageError("--keep-tuning writes next to --out: give --out FILE too")
    if args.out:
        results.check_output_path(args.out, "--out")
    writer = results.RecordWriter(args.out)
    if args.keep_tuning:
        results.check_output_path(writer.raw_path, "--out (its raw side file)")
    _print_header(args, fabric, reduction)
    group: list[dict] = []
    index = 0
    for point in points:
        rec = make_record(static, point, index, fabric)
        raw = None
        if args.keep_tuning and point.candidates is not None:
            raw = {"point": index, "size_bytes": point.size, "workload": point.workload,
                   "impl": point.impl, "tuning_candidates": point.candidates}  # fmt: skip
        index += 1
        writer.write(rec, raw)
        if group and _group_key(group[0]) != _group_key(rec):
            _flush(group)
            group = []
        group.append(rec)
    _flush(group)
    if args.out:
        print(f"# {index} modelled records appended to {args.out}")
    sys.stdout.flush()
    return 0


def _group_key(rec: dict) -> tuple:
    return rec["nodes"], rec["size_bytes"], rec["workload"]


def _flush(group: list[dict]) -> None:
    if not group:
        return
    fastest = min(r["time_us"] for r in group)
    for rec in group:
        _print_row(rec, best=len(group) > 1 and rec["time_us"] == fastest)
