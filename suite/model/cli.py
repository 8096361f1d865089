"""The cost model's commands: ``commbench simulate`` (predictions as records and a table),
``commbench schedule`` (a FAST schedule, synthesised and reported), ``commbench workload``
(a traffic matrix in nccl-tests' ``alltoallv_perf`` format) and ``commbench
model-validation`` (the model next to the papers' headlines).

Examples::

    commbench simulate alltoallv --system h200 --servers 2,4,8,16,40 --workload zipf:0.8 \\
        --size 64M --impls fast,fanout,spreadout,balance-only
    commbench simulate allreduce --system perlmutter --nodes 2,4,8,16,32 -b 64K -e 2M \\
        --impls nvrar,ring,recursive-doubling,nccl
    commbench workload zipf:0.8 --ranks 64 --size 1M -o matrix.txt
    commbench schedule --workload zipf:0.8 --servers 8 --gpus-per-node 4 --show
    commbench model-validation --out results/reference/model-validation.md

The work is done by :mod:`commbench.model.simulate` and :mod:`commbench.model.validation`;
this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from commbench import __version__
from commbench.errors import UsageError
from commbench.harness import metrics, results
from commbench.harness.workloads import DEFAULT_SEED, check_memory
from commbench.kernels.model import Fabric
from commbench.kernels.model import alltoallv as a2a_model
from commbench.model.simulate import (
    ALLREDUCE_IMPLS,
    ALLTOALLV_IMPLS,
    BLOCK_IMPLS,
    OVERRIDES,
    allreduce_points,
    alltoallv_points,
    block_points,
    fabric_from_profile,
    make_record,
    static_fields,
)
from commbench.units import format_size, parse_size, size_sweep

DEFAULT_SIZE = "1M"
#: Peak bytes per GPU-pair while a schedule is made (measured ~520 at 1000 and 2000 GPUs).
SCHEDULE_BYTES_PER_ENTRY = 600


def _add_offline_parsers(subparsers) -> None:
    w = subparsers.add_parser(
        "workload",
        help="write a traffic matrix (nccl-tests alltoallv_perf format)",
        description="Generate a workload's P x P byte matrix (row = sender) and write it in "
        "the format nccl-tests' alltoallv_perf reads (NCCL_TESTS_ALLTOALLV_MATRIX_FILE).",
    )
    w.add_argument("spec", help="uniform, random, zipf[:S], hotspot[:H], perm-sum[:K], "
                   "moe:E,K, file:PATH or trace:PATH[,hidden=H,dtype=D], optionally @SEED")  # fmt: skip
    w.add_argument("--ranks", "-p", type=int, required=True, help="number of ranks P")
    _common(w)
    w.add_argument("--index", type=int, default=0,
                   help="call number (trace workloads replay matrix INDEX mod count)")  # fmt: skip
    w.add_argument("-o", "--output", default="-", help="matrix file (default: stdout)")
    w.set_defaults(func=run_workload)

    s = subparsers.add_parser(
        "schedule",
        help="synthesise a FAST all-to-allv schedule and report it",
        description="Synthesise the FAST schedule of a workload: stage count, T, the "
        "scale-out lower bound, the fan-out tail, and the synthesis time (median of "
        "repeats, numba load/compile reported separately).",
    )
    s.add_argument("--workload", "-w", default="zipf:0.8", help="workload spec (default zipf:0.8)")
    s.add_argument("--servers", "-s", type=int, required=True, help="servers S")
    s.add_argument("--gpus-per-node", "-g", type=int, required=True, help="GPUs per server G")
    _common(s)
    s.add_argument("--index", type=int, default=0, help="call number for trace workloads")
    s.add_argument("--strategy", default=None, help="bottleneck (default), threshold or bvn")
    s.add_argument("--quantum", default=None, help="round server-matrix entries up to this "
                   "size (bytes, K/M/G) or 'auto'")  # fmt: skip
    s.add_argument("--max-stages", default="auto",
                   help="most stages, the rest in a fan-out tail: N, 'auto' (max(2 S, 10)) or 'none'")  # fmt: skip
    s.add_argument("--stage-cost", default="0", help="per-stage fixed cost alpha*B in bytes "
                   "(K/M/G); > 0 lets the cost model cut the stage count")  # fmt: skip
    s.add_argument("--tail-penalty", type=float, default=2.0,
                   help="cost of a tail byte relative to a stage byte (default 2)")  # fmt: skip
    s.add_argument("--repeats", "-r", type=int, default=20,
                   help="synthesis repeats; the median is reported (default 20)")  # fmt: skip
    s.add_argument("--show", action="store_true", help="also print every stage")
    s.set_defaults(func=run_schedule)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", "-n", default=DEFAULT_SIZE,
                   help=f"mean bytes each rank sends (K/M/G; default {DEFAULT_SIZE})")  # fmt: skip
    p.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="workload seed (a spec's @SEED wins)"
    )
    p.add_argument("--unit", type=int, default=1,
                   help="alignment unit in bytes (element size); entries are multiples of it")  # fmt: skip


def run_workload(args: argparse.Namespace) -> int:
    from commbench.harness.workloads import generate, write_matrix

    if args.ranks < 1:
        raise UsageError(f"--ranks must be at least 1 (got {args.ranks})")
    if args.output != "-":
        from commbench.harness.results import check_output_path

        check_output_path(args.output, "-o")
    d = generate(args.spec, args.ranks, parse_size(args.size), seed=args.seed, unit=args.unit,
                 index=args.index)  # fmt: skip
    if args.output == "-":
        write_matrix(sys.stdout, d)
        return 0
    write_matrix(args.output, d)
    print(f"wrote {args.output}: {args.spec} on {args.ranks} ranks, {int(d.sum())} bytes "
          f"({int(d.sum()) // args.ranks} per rank on average), largest entry {int(d.max())}")  # fmt: skip
    return 0


def _optional(text: str | None, name: str, allow_auto: bool = True):
    if text is None:
        return None
    if str(text).lower() == "none":
        return None
    if allow_auto and str(text).lower() == "auto":
        return "auto"
    try:
        return int(text) if name == "--max-stages" else parse_size(text)
    except ValueError:
        raise UsageError(f"{name} must be a number, 'auto' or 'none' (got {text!r})") from None


def _seed(spec: str, seed: int | None) -> int:
    from commbench.harness.workloads import DEFAULT_SEED, parse_workload

    w = parse_workload(spec)
    return w.seed if w.seed is not None else seed if seed is not None else DEFAULT_SEED


def run_schedule(args: argparse.Namespace) -> int:
    import commbench.kernels.fast as fast
    from commbench.harness.workloads import generate

    if args.servers < 1 or args.gpus_per_node < 1:
        raise UsageError("--servers and --gpus-per-node must be at least 1")
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1 (got {args.repeats})")
    p = args.servers * args.gpus_per_node
    check_memory(p, f"scheduling {p} GPUs (-s {args.servers} -g {args.gpus_per_node})",
                 SCHEDULE_BYTES_PER_ENTRY)  # fmt: skip
    size = parse_size(args.size)
    d = generate(args.workload, p, size, seed=args.seed, unit=args.unit, index=args.index)
    opts = {
        "unit": args.unit,
        "strategy": args.strategy or fast.DEFAULT_STRATEGY,
        "quantum": _optional(args.quantum, "--quantum"),
        "max_stages": _optional(args.max_stages, "--max-stages"),
        "stage_cost_bytes": parse_size(args.stage_cost),
        "tail_penalty": args.tail_penalty,
    }
    load_s = fast.warmup()
    sched = fast.schedule(d, args.gpus_per_node, **opts)
    synth, plan = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        s = fast.schedule(d, args.gpus_per_node, **opts)
        t1 = time.perf_counter()
        s.plan(0)
        t2 = time.perf_counter()
        synth.append(t1 - t0)
        plan.append(t2 - t1)
    sm = sched.summary()
    mem = sched.extra_memory()
    lb = sched.lower_bound
    over = f"{(sched.scheduled_bytes / lb - 1) * 100:+.3f} %" if lb else "n/a"
    rows = [
        (
            "workload",
            f"{args.workload} on {args.servers} x {args.gpus_per_node} GPUs, "
            f"{int(d.sum()) // p} B sent per GPU on average "
            f"(seed {_seed(args.workload, args.seed)})",
        ),  # fmt: skip
        (
            "strategy",
            f"{sched.strategy}, max stages "
            f"{sched.max_stages if sched.max_stages is not None else 'none'}, "
            f"quantum {sched.quantum} B, stage cost {opts['stage_cost_bytes']} B",
        ),  # fmt: skip
        ("stages", f"{sched.nstages} (decomposition computed {sm['stages_computed']})"),
        ("T (padded line sum)", f"{sched.line_sum} B per NIC"),
        ("lower bound", f"{lb} B per NIC"),
        ("stage bytes", f"{sched.stage_bytes} B per NIC"),
        (
            "tail bytes",
            f"{sched.tail_bytes} B on the busiest NIC "
            f"({sm['tail_fraction'] * 100:.2f} % of scale-out bytes)",
        ),  # fmt: skip
        ("scheduled", f"{sched.scheduled_bytes} B per NIC ({over} vs lower bound)"),
        (
            "scratch memory",
            f"{mem['fraction'] * 100:.1f} % of send+recv bytes "
            f"(largest rank {mem['max_rank_bytes']} B)",
        ),  # fmt: skip
        ("synthesis", f"{statistics.median(synth) * 1e6:.1f} us (median of {args.repeats})"),
        ("rank-0 plan", f"{statistics.median(plan) * 1e6:.1f} us (median of {args.repeats})"),
        ("numba load/compile", f"{load_s:.3f} s (once per process, not in synthesis)"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if args.show:
        print()
        print(f"{'stage':>5} {'bytes/GPU':>14}  server -> server")
        for k, st in enumerate(sched.stages):
            perm = " ".join(str(int(t)) for t in st.perm)
            print(f"{k:>5} {st.nbytes:>14}  {perm}")
    return 0


def _add_simulate_parser(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="predict collective times on a modelled cluster (cost model, no MPI)",
        description="Evaluate the two-tier cost model for all-to-allv patterns or "
        "all-reduce algorithms on a system profile's fabric; print a table and "
        "optionally append JSONL records marked modelled.",
    )
    p.add_argument("collective", choices=("alltoallv", "allreduce", *BLOCK_IMPLS))
    p.add_argument("--system", required=True,
                   help="profile in jobs/systems (h200, ...) or a profile file PATH.toml "
                   "(what `commbench calibrate` writes)")  # fmt: skip
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
        "--calls",
        dest="calls_averaged",
        type=int,
        default=None,
        help="the timed calls a measured time averages (a run's -n; default 1): on a lossy "
        "fabric, how a rare timeout shows in the slowest rank's mean",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="FAST scheduler option (strategy, quantum, max_stages, stage_cost_bytes, ...); "
        "broadcast: the tree's chunk_bytes",
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
        "into a NIC take (1 + incast (k-1) overflow) times as long (not where a loss "
        "timeout is set: give --loss-timeout-us 0 with it)",
    )
    g.add_argument(
        "--loss-timeout-us",
        dest="loss_timeout_us",
        type=float,
        help="a retransmission timeout: the ranks of a step whose NICs take several senders "
        "may pay one, by the profile's loss_late, instead of the incast multiplier "
        "(default: the profile's loss_timeout_us in its lossy case; 0: none)",
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
    p.add_argument(
        "--after-rest",
        action="store_true",
        help="all-reduce: the first call after a rest, every NIC's token bucket full "
        "(default: a call of the timed loop, which finds them as the call before left them; "
        "the same where the profile has no nic_burst_bytes)",
    )
    p.add_argument("--out", default=None, help="append JSONL records here")
    p.add_argument(
        "--keep-tuning",
        action="store_true",
        help="FAST: also write the tuner's every candidate (options, time, stages) to the raw "
        "side file <out>.raw.jsonl (records keep a short tuning summary)",
    )
    p.set_defaults(func=run_simulate)


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

    default = {"allreduce": "bf16", "alltoallv": "uint8"}.get(args.collective, "float")
    return parse_dtype(args.datatype or default)


# ---------------------------------------------------------------- the table


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
        + (f"  loss timeout {f.loss_timeout_us:g} us" if f.loss_timeout_us else "")
    )
    if args.after_rest:
        print(f"#  the first call after a rest: every token bucket full "
              f"({f.nic_burst_bytes:g} B a NIC)")  # fmt: skip
    if args.collective == "alltoallv":
        print("#  algbw = busiest rank's max(send, recv) bytes / time; "
              f"time = {reduction} over ranks; lb = busiest NIC's bytes / bandwidth")  # fmt: skip
        print(f"# {'nodes':>5s} {'ranks':>5s} {'size':>6s} {'workload':>12s} {'impl':>13s} "
              f"{'time(us)':>11s} {'algbw':>8s} {'busbw':>8s} {'lb(us)':>10s} {'t/lb':>6s} "
              f"{'stages':>6s}")  # fmt: skip
    else:
        lb = {"allreduce": "2(N-1)/N bytes per node", "broadcast": "the buffer into a node"}
        print(f"#  algbw = size / time; time = {reduction} over ranks; "
              f"lb = {lb.get(args.collective, '(N-1)/N bytes per node')} over its NICs")  # fmt: skip
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


def run_simulate(args: argparse.Namespace) -> int:
    from commbench.harness.collectives import DEFAULT_TIME_REDUCTION
    from commbench.harness.driver import parse_params

    if args.calls_averaged is not None and args.calls_averaged < 1:
        raise UsageError(f"--calls must be at least 1 (the timed calls a measured time "
                         f"averages; got {args.calls_averaged})")  # fmt: skip
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
    if args.after_rest and args.collective != "allreduce":
        raise UsageError("--after-rest applies to all-reduce (its models keep token buckets)")
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
    elif args.collective == "allreduce":
        if args.param:
            raise UsageError("--param applies to the FAST scheduler (alltoallv) only")
        impls = _impls(args, ALLREDUCE_IMPLS)
        points = allreduce_points(fabric, nodes_list, sizes, impls, dtype.itemsize,
                                  args.after_rest)  # fmt: skip
    else:
        chunk = params.pop("chunk_bytes", None)
        if params or (chunk is not None and args.collective != "broadcast"):
            raise UsageError(
                "--param: broadcast takes chunk_bytes (the tree's chunk), nothing else"
            )
        if chunk is not None and (
            isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1
        ):
            raise UsageError(f"--param chunk_bytes={chunk!r}: give a whole number of bytes >= 1")
        impls = _impls(args, BLOCK_IMPLS[args.collective])
        points = block_points(fabric, args.collective, nodes_list, sizes, impls, dtype.itemsize,
                              chunk)  # fmt: skip
    static = static_fields(args, fabric, dtype, reduction, params)
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


def _add_validation_parser(sub) -> None:
    ap = sub.add_parser(
        "model-validation",
        help="the cost model next to the papers' headlines (results/reference/model-validation.md)",
        description="Model every headline of the FAST and NVRAR papers it can and write the "
        "table (out of sample: no constant was fitted to the papers' numbers).",
    )
    ap.add_argument("--out", help="write the table here (default: print it)")
    ap.add_argument("--check", help="exit 1 if this file differs from the model's table")
    ap.add_argument("--records", help="also write the figures' modelled records in this folder")
    ap.set_defaults(func=run_validation)


def run_validation(args: argparse.Namespace) -> int:
    from commbench.model.validation import render

    if args.records:
        for path in write_records(args.records):
            print(f"# modelled records: {path}", file=sys.stderr)
    text = render()
    if args.check:
        same = Path(args.check).read_text() == text
        if not same:
            print(f"{args.check} is out of date: regenerate it with "
                  f"commbench model-validation --out {args.check}", file=sys.stderr)  # fmt: skip
        return 0 if same else 1
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _add_calibrate_parser(sub) -> None:
    from commbench.model import calibrate

    p = sub.add_parser(
        "calibrate",
        help="measure a system profile with microbenchmarks (under mpiexec/srun, or "
        "`commbench cluster exec`)",
        description="Ping-pong latency and streaming rate inside a node and between nodes, "
        "all NICs at once, N-to-1 incast, an empty stage round, the host cost per posted "
        "message and the reduction rate; writes a system profile whose every constant is "
        "measured, and the raw points. Never times the collectives the model predicts.",
    )
    calibrate.add_arguments(p)
    p.set_defaults(func=calibrate.run_calibrate)


def add_parser(sub) -> None:
    _add_simulate_parser(sub)
    _add_calibrate_parser(sub)
    _add_offline_parsers(sub)
    _add_validation_parser(sub)


#: ``commbench simulate`` runs behind figures 1, 2 and 7 (the papers' configurations)
FIGURE_RUNS = {
    "perlmutter-allreduce": ["allreduce", "--system", "perlmutter", "--nodes", "2,4,8,16",
                             "-b", "64K", "-e", "2M"],
    "vista-allreduce": ["allreduce", "--system", "vista", "--nodes", "2,4,8,16",
                        "-b", "64K", "-e", "2M"],
    "mi300x-alltoallv-skew": ["alltoallv", "--system", "mi300x", "--servers", "4",
                              "--workload", "zipf:0.1,0.5,0.8,0.99", "--size", "256M",
                              "--impls", "fast,fanout,spreadout,balance-only,pxn"],
    "mi300x-alltoallv-size": ["alltoallv", "--system", "mi300x", "--servers", "4",
                              "--workload", "zipf:0.8", "-b", "1M", "-e", "256M", "-f", "4",
                              "--impls", "fast,fanout,spreadout,pxn"],
    "h200-alltoallv-scale": ["alltoallv", "--system", "h200", "--servers", "2,4,8,16,40",
                             "--workload", "expert-zipf:0.8", "--size", "64M",
                             "--impls", "fast,fanout,spreadout,deepep,pxn"],
}  # fmt: skip


def write_records(out_dir: str | Path) -> list[Path]:
    """Run :data:`FIGURE_RUNS` as ``commbench simulate --out``; returns the files."""
    import contextlib
    import io

    parser = argparse.ArgumentParser(prog="commbench")
    _add_simulate_parser(parser.add_subparsers())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, args in FIGURE_RUNS.items():
        path = out / f"model-{name}.jsonl"
        path.unlink(missing_ok=True)
        with contextlib.redirect_stdout(io.StringIO()):
            run_simulate(parser.parse_args(["simulate", *args, "--out", str(path)]))
        paths.append(path)
    return paths
