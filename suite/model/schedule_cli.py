"""``commbench workload`` (write a traffic matrix) and ``commbench schedule`` (FAST).

``commbench workload SPEC --ranks P [--size BYTES] [--seed N] [-o FILE]`` writes the
nccl-tests ``alltoallv_perf`` matrix of a workload (stdout without ``-o``);
``commbench schedule --workload SPEC --servers S --gpus-per-node G [--strategy X]
[--show]`` synthesises the FAST schedule and prints its stage count, T, the lower bound
and the synthesis time (median of repeats; the numba load/compile time separately).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from commbench.errors import UsageError
from commbench.harness.workloads import DEFAULT_SEED, check_memory
from commbench.units import parse_size

DEFAULT_SIZE = "1M"
#: Peak bytes per GPU-pair while a schedule is made (measured ~520 at 1000 and 2000 GPUs).
SCHEDULE_BYTES_PER_ENTRY = 600


def add_parser(subparsers) -> None:
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
