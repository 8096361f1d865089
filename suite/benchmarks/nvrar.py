"""NVRAR's microbenchmark on this machine, the tuning-table generator, and GPU checks.

``python -m commbench.benchmarks.nvrar`` (what ``make bench`` runs) prints the paper's
microbenchmark table: all-reduce latency of NVRAR, MPI_Allreduce, ring, recursive
doubling and Rabenseifner, bf16, 64 KiB - 2 MiB, **max over ranks**, on 8 ranks = 2
emulated nodes x 4 GPUs (``--np`` / ``--gpus-per-node``). Timing as the harness's
``pipelined`` mode: per point ``--warmup`` untimed calls, a barrier, ``--iters`` calls timed
as a whole; the table shows the median over ``--rounds`` interleaved rounds (the machine
is shared, rounds tame the noise) and the paper's own NVRAR numbers for reference. Each
point is also checked once (``#wrong``).

``python -m commbench.benchmarks.nvrar step`` (cpu) puts calibrate's ``put`` point (one
LL8 cell a step, with its host work) beside NVRAR's own inter-node step at 256 B and
4 KiB per rank, in one launch, ``--rounds`` times alternating, each the median of 5 rounds
of 5 calls per step, slowest rank: what ``put_us`` stands for, checked against what it
models (run it on the emulated cluster: ``commbench cluster exec -- python -m
commbench.benchmarks.nvrar step --gpus-per-node 1``).

``python -m commbench.benchmarks.nvrar tune --backend cpu|cuda`` measures NVRAR for each
candidate chunk size / grid and writes the winner per size to the backend's tuning table
(``kernels/nvrar/tuning_<backend>.json``).

Without a launcher around it the module starts itself under ``mpiexec -n NP`` ($MPIEXEC,
else the one next to this Python); under ``mpiexec``/``srun`` it runs in place.

The GPU checks of NVRAR's kernels and NVSHMEM path are ``make gpu-check``'s
(:mod:`commbench.gpucheck.nvrar`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from commbench.launch import relaunch, under_launcher

IMPLS = ("nvrar", "mpi", "ring", "recursive-doubling", "rabenseifner")
SIZES = tuple(64 * 1024 << k for k in range(6))  # 64 KiB .. 2 MiB
#: NVRAR alone, 16 A100 on 4 Perlmutter nodes, bf16 (Singhania et al. 2026), in µs.
PAPER_NVRAR_US = {8 << 10: 62, 64 << 10: 72, 128 << 10: 77, 256 << 10: 82, 512 << 10: 105,
                  1 << 20: 158}  # fmt: skip


# ---------------------------------------------------------------- measuring


def _setup(backend: str, gpus_per_node: int):
    from commbench.harness.backends import create_transport
    from commbench.harness.topology import Topology

    topo = Topology.create(gpus_per_node=gpus_per_node)
    return topo, create_transport(backend, topo)


def time_point(t, impl, point, iters: int, warmup: int) -> float:
    """Per-call µs on this rank, pipelined as the harness times it."""
    case = point.case
    impl.setup(case)
    for _ in range(warmup):
        impl.run(case)
    t.synchronize()
    t.barrier()
    t0 = t.now()
    for _ in range(iters):
        impl.run(case)
    t.synchronize()
    return (t.now() - t0) / iters * 1e6


def wrong_elements(t, impl, point, rep: int) -> int:
    from commbench.harness import collectives

    collectives.fill(t, point, rep=rep)
    impl.setup(point.case)
    t.barrier()
    impl.run(point.case)
    return collectives.count_wrong(t, point, rep=rep)


def measure(t, impls: dict, sizes, dtype, iters: int, warmup: int, rounds: int) -> dict:
    """{(name, size): (median over rounds of the max over ranks µs, total #wrong)}."""
    from mpi4py import MPI

    from commbench.harness import collectives

    world = t.topo.world
    points = {s: collectives.allreduce_point(t, s, dtype, "sum") for s in sizes}
    samples: dict = {}
    wrong: dict = {}
    names = list(impls)
    for rnd in range(rounds):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]
        for size in sizes:
            for name in order:
                point = points[size]
                if rnd == 0:
                    w = wrong_elements(t, impls[name], point, rep=size % 97)
                    wrong[(name, size)] = world.allreduce(w, op=MPI.SUM)
                us = time_point(t, impls[name], point, iters, warmup)
                samples.setdefault((name, size), []).append(world.allreduce(us, op=MPI.MAX))
    return {k: (float(np.median(v)), wrong[k]) for k, v in samples.items()}


# ---------------------------------------------------------------- the table


def run_table(args) -> int:
    from commbench.harness.backends.dtypes import parse_dtype
    from commbench.kernels.dtypes import dtype_name
    from commbench.kernels.registry import lookup
    from commbench.units import format_size

    topo, t = _setup(args.backend, args.gpus_per_node)
    dtype = parse_dtype(args.dtype)
    specs = {name: lookup("allreduce", name) for name in args.impls}
    problems = {n: s.support_problem(args.backend, dtype_name(dtype)) for n, s in specs.items()}
    impls = {n: s.factory(t, {}) for n, s in specs.items() if problems[n] is None}
    t0 = time.perf_counter()
    res = measure(t, impls, SIZES, dtype, args.iters, args.warmup, args.rounds)
    if topo.rank == 0:
        for problem in filter(None, problems.values()):
            print(f"# left out: {problem}")
        names = list(impls)
        print(
            f"# NVRAR microbenchmark: all-reduce latency (us), {dtype.name}, max over ranks; "
            f"{topo.size} ranks = {topo.nodes} emulated nodes x {topo.gpus_per_node} "
            f"GPUs, backend {args.backend}"
        )
        print(
            f"# pipelined: {args.warmup} untimed calls, barrier, {args.iters} calls timed; "
            f"median of {args.rounds} interleaved rounds; "
            f"{t.describe().get('library', '')}"
        )
        print("# paper: NVRAR alone on 16 A100 (4 Perlmutter nodes x 4), bf16 - another machine")
        head = "".join(f"{n[:12]:>13s}" for n in names)
        print(f"# {'size':>6s}{head} {'mpi/nvrar':>10s} {'paper':>7s} {'#wrong':>7s}")
        for size in SIZES:
            row = "".join(f"{res[(n, size)][0]:13.1f}" for n in names)
            ratio = res[("mpi", size)][0] / res[("nvrar", size)][0] if "mpi" in impls else 0
            paper = PAPER_NVRAR_US.get(size)
            nwrong = sum(res[(n, size)][1] for n in names)
            print(f"  {format_size(size):>6s}{row} {ratio:10.2f} "
                  f"{paper if paper else '-':>7} {nwrong:7d}")  # fmt: skip
        print(f"# {time.perf_counter() - t0:.0f} s")
        sys.stdout.flush()
    bad = sum(v[1] for v in res.values())
    for impl in impls.values():
        if hasattr(impl, "close"):
            impl.close()
    t.close()
    return 1 if bad else 0


# ---------------------------------------------------------------- tuning


def candidates(backend: str) -> list[dict]:
    if backend == "cpu":
        return [{"chunk_bytes": c} for c in (1 << 30, 256 << 10, 64 << 10, 16 << 10)]
    return [
        {"chunk_bytes": c, "blocks": b, "threads": th}
        for c in (16 << 10, 64 << 10, 256 << 10)
        for b in (1, 4, 16, 32)
        for th in (256, 512)
    ]


def run_tune(args) -> int:
    from commbench.harness.backends.dtypes import parse_dtype
    from commbench.kernels.nvrar.tuning import Tuning, TuningTable, table_path, write_table
    from commbench.kernels.registry import lookup

    topo, t = _setup(args.backend, args.gpus_per_node)
    if topo.nodes < 2:
        raise SystemExit("tune needs at least 2 nodes: more ranks or a smaller --gpus-per-node")
    dtype = parse_dtype(args.dtype)
    seg_sizes = [16 << 10 << 2 * k for k in range(4)]  # per-rank inter-node bytes
    sizes = [s * topo.gpus_per_node for s in seg_sizes]
    cands = candidates(args.backend)
    factory = lookup("allreduce", "nvrar").factory
    impls = {f"c{i}": factory(t, dict(c)) for i, c in enumerate(cands)}
    res = measure(t, impls, sizes, dtype, args.iters, args.warmup, args.rounds)
    entries = []
    for seg, size in zip(seg_sizes, sizes, strict=True):
        best = min(impls, key=lambda k: res[(k, size)][0])
        c = cands[int(best[1:])]
        entries.append((seg, Tuning(c["chunk_bytes"], c.get("blocks", 1), c.get("threads", 1))))
        if topo.rank == 0:
            print(f"# segment {seg:>8d} B: best {c} {res[(best, size)][0]:.1f} us "
                  f"(worst {max(res[(k, size)][0] for k in impls):.1f} us)")  # fmt: skip
    if topo.rank == 0:
        source = (
            f"measured by `python -m commbench.benchmarks.nvrar tune` on {topo.hostname}: "
            f"{topo.size} ranks = {topo.nodes} x {topo.gpus_per_node}, {dtype.name}, "
            f"median of {args.rounds} rounds of {args.iters} calls, max over ranks"
        )
        path = Path(args.out) if args.out else table_path(args.backend)
        write_table(TuningTable(args.backend, tuple(entries), source), path)
        print(f"# wrote {path}")
    bad = sum(v[1] for v in res.values())
    for impl in impls.values():
        impl.close()
    t.close()
    return 1 if bad else 0


# ---------------------------------------------------------------- step vs put point

STEP_SIZES = (256, 4096)


def run_step(args) -> int:
    """Calibrate's ``put`` point and NVRAR's inter-node step side by side (cpu)."""
    from mpi4py import MPI

    from commbench.harness.backends.dtypes import parse_dtype
    from commbench.kernels.nvrar import cells
    from commbench.kernels.nvrar.cpu import MpiRail
    from commbench.kernels.nvrar.tuning import load_table
    from commbench.model import calibrate as cal

    comm, g = MPI.COMM_WORLD, args.gpus_per_node
    if comm.size % g or comm.size // g < 2:
        if comm.rank == 0:
            print(f"step: need at least 2 nodes of {g} ranks (got {comm.size} ranks): more "
                  "ranks or a smaller --gpus-per-node", file=sys.stderr)  # fmt: skip
        return 2
    dtype = parse_dtype(args.dtype)
    nsteps = max(len(cal.butterfly_partners(0, comm.size // g, g)), 1)
    rail_comm = comm.Split(comm.rank % g, comm.rank)
    rail = MpiRail(rail_comm, lambda node: node * g + comm.rank % g, 60.0)
    table = load_table("cpu")
    rows: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        rows.setdefault("put point", []).append(cal.put_rounds(comm, g, dtype, 5, 5))
        for nbytes in STEP_SIZES:
            n = nbytes // dtype.itemsize
            src, dst = np.ones(n, dtype=dtype), np.zeros(n, dtype=dtype)
            rail.prepare(cells.cell_count(n, dtype.itemsize))
            tuning = table.lookup(nbytes)

            def calls(src=src, dst=dst, tuning=tuning) -> None:
                for _ in range(5):
                    rail.run(src, dst, dtype, "sum", tuning)

            calls()  # warm-up
            secs = cal.median_round(comm, calls, 5) / (5 * nsteps)
            rows.setdefault(f"nvrar {nbytes} B", []).append(secs)
    rail.close()
    rail_comm.Free()
    if comm.rank == 0:
        print(f"# {comm.size // g} nodes x {g} ranks, {dtype.name}: us a step, slowest rank, "
              f"{args.rounds} rounds")  # fmt: skip
        for name, secs in rows.items():
            print(f"{name:>14}: " + " ".join(f"{s * 1e6:7.0f}" for s in secs))
    return 0


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m commbench.benchmarks.nvrar", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("command", nargs="?", default="table", choices=("table", "tune", "step"))
    p.add_argument("--np", type=int, default=8, help="ranks when starting itself (default 8)")
    p.add_argument("--gpus-per-node", type=int, default=4, help="emulated GPUs per node (4)")
    p.add_argument("--backend", default="cpu", help="cpu (default) or cuda")
    p.add_argument("-d", "--dtype", default="bf16")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma-separated (table)")
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None, help="tune: table path (default: the shipped one)")
    p.add_argument("--timeout", type=float, default=900, help="seconds for the whole launch")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.impls = [s for s in args.impls.split(",") if s]
    if not under_launcher():
        return relaunch(args.np, "commbench.benchmarks.nvrar", argv, args.timeout)
    run = {"table": run_table, "tune": run_tune, "step": run_step}[args.command]
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
