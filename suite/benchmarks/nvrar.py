"""NVRAR's microbenchmark on this machine, the tuning-table generator, and GPU checks.

``python -m suite.benchmarks.nvrar`` (what ``make bench`` runs) prints the paper's
microbenchmark table: all-reduce latency of NVRAR, MPI_Allreduce, ring, recursive
doubling and Rabenseifner, bf16, 64 KiB - 2 MiB, **max over ranks**, on 8 ranks = 2
emulated nodes x 4 GPUs (``--np`` / ``--gpus-per-node``). Timing as the harness's
``pipelined`` mode: per point ``--warmup`` untimed calls, a barrier, ``--iters`` calls timed
as a whole; the table shows the median over ``--rounds`` interleaved rounds (the machine
is shared, rounds tame the noise) and the paper's own NVRAR numbers for reference. Each
point is also checked once (``#wrong``).

``python -m suite.benchmarks.nvrar tune --backend cpu|cuda`` measures NVRAR for each
candidate chunk size / grid and writes the winner per size to the backend's tuning table
(``kernels/nvrar/tuning_<backend>.json``).

Without a launcher around it the module starts itself under ``mpiexec -n NP`` ($MPIEXEC,
else the one next to this Python); under ``mpiexec``/``srun`` it runs in place.

``check_ll8_kernels`` and ``check_nvshmem_one_pe`` are the GPU checks (``gpu-check``
sub-command, and for ``suite.gpucheck``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

IMPLS = ("nvrar", "mpi", "ring", "recursive-doubling", "rabenseifner")
SIZES = tuple(64 * 1024 << k for k in range(6))  # 64 KiB .. 2 MiB
#: NVRAR alone, 16 A100 on 4 Perlmutter nodes, bf16 (spec nvrar.md), in µs.
PAPER_NVRAR_US = {8 << 10: 62, 64 << 10: 72, 128 << 10: 77, 256 << 10: 82, 512 << 10: 105,
                  1 << 20: 158}  # fmt: skip
_LAUNCHED = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID", "PALS_RANKID")


# ---------------------------------------------------------------- launching


def under_launcher() -> bool:
    """True when started by mpiexec/srun (checked without initialising MPI)."""
    return any(v in os.environ for v in _LAUNCHED)


def relaunch(
    np_: int, argv: list[str], timeout: float, module: str = "suite.benchmarks.nvrar"
) -> int:
    """Run ``module`` (default: this one) with ``argv`` on ``np_`` ranks; returns the exit
    status."""
    launcher = os.environ.get("MPIEXEC") or str(Path(sys.executable).parent / "mpiexec")
    if not Path(launcher).exists():
        launcher = shutil.which("mpiexec") or "mpiexec"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for key, value in (
        ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
        ("OMPI_MCA_osc", "^ucx"),
        ("OMPI_MCA_rmaps_base_oversubscribe", "1"),
        ("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe"),
    ):
        env.setdefault(key, value)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [launcher, "-n", str(np_), sys.executable, "-m", module, *argv]
    try:
        return subprocess.run(cmd, env=env, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"{module}: no result after {timeout:g} s, stopped", file=sys.stderr)
        return 124


# ---------------------------------------------------------------- measuring


def _setup(backend: str, gpus_per_node: int):
    from suite.backends import create_transport
    from suite.topology import Topology

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
    from suite import collectives

    collectives.fill(t, point, rep=rep)
    impl.setup(point.case)
    t.barrier()
    impl.run(point.case)
    return collectives.count_wrong(t, point, rep=rep)


def measure(t, impls: dict, sizes, dtype, iters: int, warmup: int, rounds: int) -> dict:
    """{(name, size): (median over rounds of the max over ranks µs, total #wrong)}."""
    from mpi4py import MPI

    from suite import collectives

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
    from kernels.registry import lookup
    from suite.backends.dtypes import parse_dtype
    from suite.units import format_size

    topo, t = _setup(args.backend, args.gpus_per_node)
    impls = {name: lookup("allreduce", name).factory(t, {}) for name in args.impls}
    dtype = parse_dtype(args.dtype)
    t0 = time.perf_counter()
    res = measure(t, impls, SIZES, dtype, args.iters, args.warmup, args.rounds)
    if topo.rank == 0:
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
    from kernels.nvrar.tuning import Tuning, TuningTable, table_path, write_table
    from kernels.registry import lookup
    from suite.backends.dtypes import parse_dtype

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
            f"measured by `python -m suite.benchmarks.nvrar tune` on {topo.hostname}: "
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


# ---------------------------------------------------------------- GPU checks


def check_ll8_kernels(count: int = 1001, big: int = 64 << 20) -> dict:
    """The LL8 kernels on one GPU against the CPU reference (cells.py / reduce.py), bit for
    bit, every dtype and op; a stale flag times out with the step and partner recorded;
    pack + receive bandwidth next to a plain device copy."""
    import cupy

    from kernels.nvrar import cells
    from kernels.nvrar.cuda import _ErrorRecord, load_module, recv_kernel_name
    from kernels.nvrar.reduce import BF16, reduce_into

    mod = load_module()
    err = _ErrorRecord()
    claim, record = err.args()
    rng = np.random.default_rng(5)
    out: dict = {}
    t = 2**32  # flags wrap past zero here: flag 1
    seq = cupy.asarray(np.array([t], np.uint64))
    timeout = np.int64(2e9)
    for dtype in (np.dtype(np.float32), np.dtype(np.float16), BF16, np.dtype(np.int32)):
        store = np.uint16 if dtype.itemsize == 2 else dtype
        for op in ("sum", "prod", "max", "min"):
            if dtype.kind == "i":
                x, y = (rng.integers(-(2**31), 2**31 - 1, count).astype(dtype) for _ in "xy")
            else:
                x, y = ((rng.standard_normal(count) * 4).astype(dtype) for _ in "xy")
            want = np.empty_like(x)
            with np.errstate(all="ignore"):
                reduce_into(np, want, x, y, op, dtype)
            ncells = cells.cell_count(count, dtype.itemsize)
            recv = cupy.zeros(ncells, cupy.uint64)
            nxt = cupy.zeros(ncells, cupy.uint64)
            xd, yd = cupy.asarray(x.view(store)), cupy.asarray(y.view(store))
            outd = cupy.zeros_like(xd)
            mod.get_function("ll8_pack")((4,), (128,), (yd, np.uint64(y.nbytes), recv,
                                         np.uint64(ncells), seq, claim))  # fmt: skip
            ref_cells = np.zeros(ncells, np.uint64)
            cells.pack(np, y.view(store), cells.seq_flag(t), ref_cells)
            assert np.array_equal(cupy.asnumpy(recv), ref_cells), f"pack {dtype}"
            mod.get_function(recv_kernel_name(dtype, op))(
                (4,), (128,),
                (recv, np.uint64(ncells), xd, outd, np.uint64(count), np.int32(0), nxt, seq,
                 timeout, claim, record, np.int32(1), np.int32(3)),
            )  # fmt: skip
            got = cupy.asnumpy(outd)
            assert got.tobytes() == want.view(store).tobytes(), f"reduce {dtype} {op}"
            cells.pack(np, want.view(store), cells.seq_flag(t), ref_cells)
            assert np.array_equal(cupy.asnumpy(nxt), ref_cells), f"fused pack {dtype} {op}"
            out[f"{dtype}/{op}"] = "ok"
    stale = cupy.zeros(8, cupy.uint64)  # flag 0: never this call's
    dummy = cupy.zeros(8, cupy.float32)
    mod.get_function(recv_kernel_name(np.dtype(np.float32), "sum"))(
        (1,), (32,),
        (stale, np.uint64(8), dummy, dummy, np.uint64(8), np.int32(0), np.uint64(0), seq,
         np.int64(1e6), claim, record, np.int32(2), np.int32(5)),
    )  # fmt: skip
    cupy.cuda.Device().synchronize()
    assert [int(v) for v in err.host[:3]] == [1, 2, 5], f"timeout record {err.host}"
    err.host[:] = 0
    err.claim.fill(0)
    out["timeout_record"] = "ok"
    # Bandwidth: pack + receive of `big` data bytes vs a device copy of the same bytes.
    n = big // 4
    data = cupy.ones(n, cupy.float32)
    acc = cupy.ones(n, cupy.float32)
    region = cupy.zeros(n, cupy.uint64)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    reps, grid, block = 10, (1024,), (512,)
    kern = mod.get_function(recv_kernel_name(np.dtype(np.float32), "sum"))
    args_pack = (data, np.uint64(4 * n), region, np.uint64(n), seq, claim)
    args_recv = (region, np.uint64(n), acc, acc, np.uint64(n), np.int32(0), np.uint64(0), seq,
                 timeout, claim, record, np.int32(0), np.int32(0))  # fmt: skip
    mod.get_function("ll8_pack")(grid, block, args_pack)
    start.record()
    for _ in range(reps):
        mod.get_function("ll8_pack")(grid, block, args_pack)
    stop.record()
    stop.synchronize()
    out["pack_GBps"] = 3 * 4 * n / (cupy.cuda.get_elapsed_time(start, stop) / reps * 1e-3) / 1e9
    start.record()
    for _ in range(reps):
        kern(grid, block, args_recv)
    stop.record()
    stop.synchronize()
    out["recv_reduce_GBps"] = (
        4 * 4 * n / (cupy.cuda.get_elapsed_time(start, stop) / reps * 1e-3) / 1e9
    )
    copy_dst = cupy.empty_like(data)
    start.record()
    for _ in range(reps):
        copy_dst[...] = data
    stop.record()
    stop.synchronize()
    out["device_copy_GBps"] = (
        2 * 4 * n / (cupy.cuda.get_elapsed_time(start, stop) / reps * 1e-3) / 1e9
    )
    out["bytes_moved_note"] = "pack reads 4 + writes 8 B/cell; recv reads 8+4, writes 4"
    err.free()
    return out


def check_nvshmem_one_pe() -> dict:
    """nvshmem4py initialised from mpi4py on one PE; a sub-buffer put and a counter signal
    to itself through the same calls the NVRAR cuda path makes."""
    import cupy

    from kernels.nvrar.cuda import StreamRef, init_nvshmem
    from suite.backends import create_transport
    from suite.topology import Topology

    topo = Topology.create(gpus_per_node=1)
    t = create_transport("cuda", topo)
    init_nvshmem(t)
    import nvshmem.core as nv

    arr = nv.array((1024,), dtype="uint64")
    buf, _, _ = nv.array_get_buffer(arr)
    arr[:512] = cupy.arange(512, dtype=cupy.uint64)
    arr[512:] = 0
    base = int(buf.handle)
    sub = type(buf).from_handle
    stream = StreamRef(t.stream)
    with t.stream:
        nv.put(sub(base + 8 * 600, 8 * 100), sub(base + 8 * 10, 8 * 100), remote_pe=nv.my_pe(),
               stream=stream)  # fmt: skip
        nv.signal_op(sub(base + 8 * 1000, 8), 1, nv.SignalOp.SIGNAL_ADD, remote_pe=nv.my_pe(),
                     stream=stream)  # fmt: skip
        nv.quiet(stream=stream)
    t.synchronize()
    host = cupy.asnumpy(arr)
    assert np.array_equal(host[600:700], np.arange(10, 110)), "sub-buffer put"
    assert int(host[1000]) == 1, "SIGNAL_ADD"
    result = {"pes": nv.n_pes(), "my_pe": nv.my_pe(), "version": str(nv.get_version())}
    nv.free_array(arr)
    t.close()
    return result


def run_gpu_check(args) -> int:
    failed = 0
    for check in (check_ll8_kernels, check_nvshmem_one_pe):
        try:
            print(f"{check.__name__}: ok {check()}", flush=True)
        except Exception as exc:  # each check reports, the next one still runs
            print(f"{check.__name__}: FAILED {exc!r}", flush=True)
            failed += 1
    return 1 if failed else 0


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m suite.benchmarks.nvrar", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("command", nargs="?", default="table", choices=("table", "tune", "gpu-check"))
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
    if args.command == "gpu-check":
        return run_gpu_check(args)
    if not under_launcher():
        return relaunch(args.np, argv, args.timeout)
    return run_table(args) if args.command == "table" else run_tune(args)


if __name__ == "__main__":
    raise SystemExit(main())
