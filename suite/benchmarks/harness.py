"""commbench against a C benchmark of the same MPI call: is what commbench reads the library?

For each rank count, collective and timing mode, rounds interleave two launches: ``commbench
run COLLECTIVE --impl mpi`` (records) and the standalone C reference program built from
``commbench.kernels.native``'s ``cloop.c`` with the MPI's own ``mpicc`` (no Python in its
processes; OSU's per-call timer with a barrier between calls in ``latency`` mode,
nccl-tests' back-to-back loop in ``pipelined`` mode), on the same sizes, counts and traffic
matrix. It prints commbench / C per size, the median of the rounds' ratios.

``python -m commbench.benchmarks.harness [NP ...]`` (``make bench``: 2 and 4 ranks).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SIZES = [1024 << (2 * i) for i in range(7)]  # 1 KiB ... 4 MiB, x4
COLLECTIVES = ("allreduce", "alltoallv")
MODES = ("pipelined", "latency")
ROUNDS = 3
ITERS, WARMUP = 300, 30
TIME_REDUCTION = {"allreduce": "avg", "alltoallv": "max"}  # commbench's defaults (-a)
LIMIT = 1.05  # the target: commbench reads within 5 % of C


def _mpiexec(nranks: int) -> list[str]:
    from commbench.launch import find_mpiexec

    return [find_mpiexec() or "mpiexec", "-n", str(nranks)]


def _run(cmd: list[str]) -> str:
    from commbench.launch import local_env

    proc = subprocess.run(cmd, env=local_env(), capture_output=True, text=True, timeout=600)
    if proc.returncode:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"benchmarks.harness: {' '.join(cmd[:6])} ... exited {proc.returncode}")
    return proc.stdout


def commbench_times(nranks: int, collective: str, mode: str, out: Path) -> dict[int, float]:
    """us per call by size, from a ``commbench run --impl mpi`` launch's records."""
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "commbench", "run", collective, "--impl", "mpi",
            "-b", str(SIZES[0]), "-e", str(SIZES[-1]), "-f", "4", "-n", str(ITERS),
            "-w", str(WARMUP), "-c", "0", "--timing", mode, "--out", str(out)]  # fmt: skip
    _run(_mpiexec(nranks) + argv)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["size_bytes"]: r["time_us"] for r in records}


def c_times(nranks: int, collective: str, mode: str, program: Path, points: Path) -> dict:
    """us per call by size from the standalone C program (avg or max over ranks, as above)."""
    text = _run(_mpiexec(nranks) + [str(program), str(points), mode, str(ITERS), str(WARMUP)])
    column = 1 if TIME_REDUCTION[collective] == "avg" else 2
    rows = [line.split() for line in text.splitlines() if line.strip()]
    return {int(r[0]): float(r[column]) for r in rows}


def write_points(nranks: int, collective: str, path: Path) -> None:
    """The C program's points: commbench's own sizes and (uniform) traffic matrices."""
    from commbench.harness.workloads import DEFAULT_SEED, generate
    from commbench.kernels import native

    unit = 4  # float32, commbench's default -d
    points = [
        (collective, size, unit,
         generate("uniform", nranks, size, seed=DEFAULT_SEED, unit=unit)
         if collective == "alltoallv" else None)
        for size in SIZES
    ]  # fmt: skip
    native.write_points(path, nranks, points)


def main(argv: list[str]) -> int:
    from commbench.kernels import native

    rank_counts = [int(a) for a in argv] or [2, 4]
    try:
        program = native.build(program=True)
    except native.NativeUnavailable as exc:
        raise SystemExit(f"benchmarks.harness: {exc}") from None
    worst = 0.0
    print(
        f"# commbench `--impl mpi` / C reference (same call, sizes and matrix), "
        f"float32, -n {ITERS} -w {WARMUP}, median of {ROUNDS} interleaved rounds"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for nranks in rank_counts:
            for collective in COLLECTIVES:
                points = Path(tmp) / f"{collective}-{nranks}.bin"
                write_points(nranks, collective, points)
                for mode in MODES:
                    ratios, c_us = [], []
                    for _ in range(ROUNDS):
                        ours = commbench_times(nranks, collective, mode, Path(tmp) / "r.jsonl")
                        ref = c_times(nranks, collective, mode, program, points)
                        ratios.append([ours[s] / ref[s] for s in SIZES])
                        c_us.append([ref[s] for s in SIZES])
                    ratio = np.median(ratios, axis=0)
                    worst = max(worst, float(ratio.max()))
                    print(
                        f"# {collective} {nranks} ranks, {mode} timing ({TIME_REDUCTION[collective]} over ranks)"
                    )
                    print(f"  {'size(B)':>9s} {'C(us)':>10s} {'commbench/C':>12s}")
                    for size, c, r in zip(SIZES, np.median(c_us, axis=0), ratio, strict=True):
                        flag = "" if r <= LIMIT else f"  > {LIMIT}"
                        print(f"  {size:9d} {c:10.2f} {r:12.3f}{flag}")
                    sys.stdout.flush()
    print(f"# worst commbench/C: {worst:.3f} (target <= {LIMIT})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
