"""``commbench sweep``: the local sweep behind ``make run``.

Runs every implementation registered for the backend, for all-reduce, all-to-allv,
all-gather, reduce-scatter and broadcast, each under its own ``mpiexec`` (one per
implementation and workload, like nccl-tests' binaries), appending to one results file
under ``--out-dir``. A failing implementation is reported and the sweep goes on; the exit
status says whether all passed.

``--repeat K`` launches every implementation K times, interleaved within each group of
launches that measure the same points (A B C A B C ...), so that a slow drift of a shared
machine falls on every implementation alike; the records of one point (one per launch,
``launch`` = 1..K) merge into one interval (:mod:`commbench.analysis.intervals`), printed
at the end.
"""

from __future__ import annotations

import datetime as _dt
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from commbench.errors import UsageError
from commbench.kernels.registry import implementations
from commbench.launch import is_open_mpi, local_env


@dataclass(frozen=True)
class SweepItem:
    collective: str
    flags: tuple[str, ...]
    workloads: tuple[str | None, ...] = (None,)
    #: only these implementations, where registered for the backend (default: all)
    impls: tuple[str, ...] | None = None


#: The Zipf exponents of figure 2's skew panels (measured by `make run` and modelled).
SKEWS = (0.0, 0.4, 0.8, 0.99)
ZIPF_SWEEP = "zipf:" + ",".join(str(s) for s in SKEWS)

#: The small sweep of each of all-gather, reduce-scatter and broadcast, in and out of place:
#: the textbook algorithm next to the libraries' (one launch each costs about as much as
#: its points, so the other algorithms are left to `commbench run`).
_BLOCKS = ("-b", "256K", "-e", "1M", "-f", "4", "-n", "5", "-w", "1", "--inplace", "both")
_LIBRARIES = ("mpi", "nccl", "rccl")
#: A point recorded span by span: calls after a barrier, as figure 8 draws them.
_TIMELINE = ("-n", "5", "-w", "2", "--timing", "latency", "--timeline")

#: What `make run` measures: the NVRAR paper's all-reduce range in bf16, all-to-allv on
#: balanced traffic over sizes and at every skew of SKEWS at two sizes (figure 2's skew
#: panels get a curve per implementation), a small sweep of each of all-gather,
#: reduce-scatter and broadcast, and one point each of the two new collectives with
#: ``--timeline`` (figure 8: where a call's time goes, per rank; ~10 s each). One launch
#: per implementation and workload list: about 3 minutes on 2 cores, plus about 70 s the
#: first time (FAST's numba core).
LOCAL_SWEEP = (
    SweepItem("allreduce", ("-d", "bf16", "-b", "64K", "-e", "2M", "-n", "10", "-w", "2")),
    SweepItem("alltoallv", ("-b", "64K", "-e", "4M", "-f", "4", "-n", "5", "-w", "2"), ("uniform",)),
    SweepItem("alltoallv", ("-b", "256K", "-e", "1M", "-f", "4", "-n", "5", "-w", "2"), (ZIPF_SWEEP,)),
    SweepItem("allgather", _BLOCKS, impls=("ring", *_LIBRARIES)),
    SweepItem("reducescatter", _BLOCKS, impls=("ring", *_LIBRARIES)),
    SweepItem("broadcast", _BLOCKS, impls=("tree", *_LIBRARIES)),
    SweepItem("allreduce", ("-d", "bf16", "-b", "1K", "-e", "1K", *_TIMELINE), impls=("nvrar",)),
    SweepItem("alltoallv", ("-b", "256K", "-e", "256K", *_TIMELINE), ("zipf:0.8",), ("fast",)),
)  # fmt: skip


#: What `make cluster-run` measures on the emulated cluster (``--cluster``): 1 MiB per
#: rank all-to-allv on balanced, skewed and MoE-like traffic, the NVRAR paper's range.
CLUSTER_SIZE = "1M"
CLUSTER_WORKLOADS = ("uniform", ZIPF_SWEEP, "moe:16,2")
CLUSTER_SWEEP = (
    SweepItem("allreduce", ("-d", "bf16", "-b", "64K", "-e", "2M", "-f", "4", "-n", "3",
                            "-w", "1")),
    SweepItem("alltoallv", ("-b", CLUSTER_SIZE, "-e", CLUSTER_SIZE, "-n", "3", "-w", "1"),
              CLUSTER_WORKLOADS),
)  # fmt: skip


#: After the measurements: one modelled table per tier of the papers (seconds each).
MODELLED = (
    ("model-h200.jsonl", ["alltoallv", "--system", "h200", "--servers", "2,8,40",
                          "--workload", "zipf:0.8", "--size", "16M,256M",
                          "--impls", "fast,fanout,spreadout,balance-only,deepep"]),
    ("model-h200-skew.jsonl", ["alltoallv", "--system", "h200", "--servers", "2,8,40",
                               "--workload", "zipf:0.0,0.4,0.99", "--size", "16M",
                               "--impls", "fast,fanout,spreadout,balance-only,deepep"]),
    ("model-perlmutter.jsonl", ["allreduce", "--system", "perlmutter", "--nodes", "2,4,8,16",
                                "-b", "64K", "-e", "2M",
                                "--impls", "nvrar,ring,recursive-doubling,nccl"]),
)  # fmt: skip


T = TypeVar("T")


def interleave(groups: Sequence[Sequence[T]], repeat: int) -> list[tuple[int, T]]:
    """``(launch, member)`` in run order: each group's members ``repeat`` times round
    robin (A B C A B C ...), group after group; launches are numbered from 1."""
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: give a count >= 1")
    return [(k + 1, m) for group in groups for k in range(repeat) for m in group]


def launches(
    backend: str, gpus_per_node: int | None, out: Path, items=LOCAL_SWEEP, repeat: int = 1
) -> list[list[str]]:
    """The ``commbench run`` command lines of the sweep (without the launcher): one group
    per item and workload, its implementations interleaved ``repeat`` times."""
    groups = []
    for item in items:
        for workload in item.workloads:
            group = []
            for spec in implementations(item.collective):
                if backend not in spec.backends or (item.impls and spec.name not in item.impls):
                    continue
                cmd = [
                    sys.executable, "-m", "commbench", "run", item.collective,
                    "--impl", spec.name, "--backend", backend, *item.flags,
                    "--out", str(out),
                ]  # fmt: skip
                if gpus_per_node is not None:
                    cmd[9:9] = ["--gpus-per-node", str(gpus_per_node)]
                if workload:
                    cmd += ["--workload", workload]
                group.append(cmd)
            groups.append(group)
    return [
        [*cmd, "--launch", str(k)] if repeat > 1 else cmd for k, cmd in interleave(groups, repeat)
    ]


def run_sweep(args) -> int:
    if args.np < 1 or args.np % args.gpus_per_node:
        raise UsageError(f"--np {args.np} must be a positive multiple of --gpus-per-node")
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: give a count >= 1")
    if not args.timeout > 0 or args.timeout == float("inf"):
        raise UsageError(f"--timeout {args.timeout}: give a finite number of seconds > 0")
    if args.cluster:
        from commbench.cluster.launcher import cluster_launcher

        launcher, gpus_per_node, items = cluster_launcher(args.cluster), None, CLUSTER_SWEEP
    else:
        mpiexec = shlex.split(args.mpiexec)
        oversubscribe = ["--oversubscribe"] if is_open_mpi(mpiexec[0]) else []
        launcher = [*mpiexec, *oversubscribe, "-n", str(args.np)]
        gpus_per_node, items = args.gpus_per_node, LOCAL_SWEEP
    stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    folder = Path(args.out_dir) / stamp
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "results.jsonl"
    env = dict(local_env(), COMMBENCH_RUN_ID=stamp)
    failed = []
    started = time.perf_counter()
    # FAST's numba core compiles once per machine; compiled here, on a core of its own, it
    # is not compiled by a rank while seven others spin in MPI on the same two cores.
    from commbench.kernels.fast import warmup

    print(f"# FAST's numba core: {warmup():.1f} s to load or compile", flush=True)
    for cmd in launches(args.backend, gpus_per_node, out, items, args.repeat):
        full = [*launcher, *cmd]
        label = " ".join(cmd[3 : cmd.index("--backend")] + cmd[cmd.index("--out") + 2 :])
        print(f"\n=== {label}", flush=True)
        try:
            rc = subprocess.run(full, env=env, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        if rc != 0:
            failed.append(f"{label} (exit {rc})")
    print(f"\n# sweep: {time.perf_counter() - started:.0f} s; results in {out}")
    if args.repeat > 1 and out.is_file():
        print_merged(out, args.repeat)
    if not args.no_report:
        modelled = MODELLED
        if args.cluster:
            from commbench.cluster.launcher import cluster_model_argv

            modelled = tuple(
                (f"model-emulated-{i}.jsonl", cluster_model_argv(args.cluster, w, CLUSTER_SIZE))
                for i, w in enumerate(CLUSTER_WORKLOADS)
            )
        failed += finish(folder, env, args.timeout, modelled)
    if failed:
        print("# FAILED: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


def finish(folder: Path, env: dict, timeout: float, modelled=MODELLED) -> list[str]:
    """Modelled tables, then the figures and the report from this run's folder."""
    steps = [
        (f"simulate {name}", [sys.executable, "-m", "commbench", "simulate", *argv,
                              "--out", str(folder / name)])
        for name, argv in modelled
    ]  # fmt: skip
    steps += [
        ("figures", [sys.executable, "-m", "commbench", "figures", str(folder),
                     "-o", str(folder / "figures")]),
        ("report", [sys.executable, "-m", "commbench", "report", str(folder),
                    "-o", str(folder / "report.html")]),
    ]  # fmt: skip
    failed = []
    for label, cmd in steps:
        print(f"\n=== {label}", flush=True)
        try:
            rc = subprocess.run(cmd, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        if rc != 0:
            failed.append(f"{label} (exit {rc})")
    print(f"\n# figures: {folder / 'figures'}\n# report:  {folder / 'report.html'}")
    return failed


def print_merged(out: Path, repeat: int) -> None:
    """One line per point of ``out``: its launches merged into one interval."""
    from commbench.analysis.intervals import merged_points
    from commbench.analysis.records import read_jsonl

    rows = merged_points([rec for _, rec in read_jsonl(out, on_torn_tail=lambda where: None)])
    print(
        f"\n# {repeat} interleaved launches per implementation, merged per point: median "
        "per-iteration time of the slowest rank (us), 95% CI, samples (launches)"
    )
    print(f"# {'collective':10s} {'impl':18s} {'workload':14s} {'size':>9s} "
          f"{'median':>10s} {'95% CI':>22s} {'n':>9s}")  # fmt: skip
    for rec, ci in rows:
        print(
            f"  {rec['collective']:10s} {rec['impl']:18s} {str(rec.get('workload') or '-')[:14]:14s} "
            f"{rec['size_bytes']:9d} {ci.median:10.2f} {ci.text():>22s} "
            f"{f'{ci.samples} ({ci.launches})':>9s}"
        )
