"""commbench against a C benchmark of the same MPI call: is what commbench reads the library?

For each rank count, collective and timing mode, rounds interleave two launches: ``commbench
run COLLECTIVE --impl mpi --reference c`` (records: commbench's time and, right after it in
the same processes, the library call timed from C on the same buffers) and the standalone C
reference program built from ``commbench.kernels.native``'s ``cloop.c`` with the MPI's own
``mpicc`` (no Python in its processes; OSU's per-call timer with a barrier between calls in
``latency`` mode, nccl-tests' back-to-back loop in ``pipelined`` mode), on the same sizes,
counts and traffic matrix. Per size it prints:

- ``vs C here``: commbench / the C reference in the same processes, median over rounds: the
  precise comparison (the two readings are taken back to back on the same buffers);
- ``vs C program``: commbench against the standalone C program launched right before and
  right after it (a pause between launches lets the previous job's processes finish
  exiting): per round commbench / the mean of the two, median over rounds. Two launches of
  one program on this kind of machine read up to 2x apart at small sizes (where the ranks
  land and what else runs), so each round is compared with its own neighbours, not one
  launch with another;
- ``C / C``: the instrument's own floor, the C program against itself: per round the launch
  before commbench over the launch after it, median over rounds. A ``vs C program`` ratio
  inside ``1 ± |C/C - 1|`` is no difference this machine can show.

``python -m commbench.benchmarks.harness [NP ...] [--rounds R]`` (``make bench``: 2 and 4
ranks, 5 rounds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = [1024 << (2 * i) for i in range(7)]  # 1 KiB ... 4 MiB, x4
COLLECTIVES = ("allreduce", "alltoallv")
MODES = ("pipelined", "latency")
ROUNDS = 5
PAUSE_S = 1.0  # between launches: the last job's processes finish exiting first
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


def commbench_times(nranks: int, collective: str, mode: str, out: Path) -> dict[int, tuple]:
    """(commbench's us per call, the in-process C reference's) by size, from a ``commbench
    run --impl mpi --reference c`` launch's records."""
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "commbench", "run", collective, "--impl", "mpi",
            "-b", str(SIZES[0]), "-e", str(SIZES[-1]), "-f", "4", "-n", str(ITERS),
            "-w", str(WARMUP), "-c", "0", "--timing", mode, "--reference", "c",
            "--out", str(out)]  # fmt: skip
    _run(_mpiexec(nranks) + argv)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["size_bytes"]: (r["time_us"], r["reference_time_us"]) for r in records}


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

    parser = argparse.ArgumentParser(
        prog="python -m commbench.benchmarks.harness",
        description="commbench --impl mpi against a C benchmark of the same MPI call.",
    )
    parser.add_argument("nranks", nargs="*", type=int, default=[2, 4], help="rank counts")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds")
    args = parser.parse_args(argv)
    try:
        program = native.build(program=True)
    except native.NativeUnavailable as exc:
        raise SystemExit(f"benchmarks.harness: {exc}") from None
    worst = floor = 0.0
    print(
        f"# commbench `--impl mpi` / C reference (same call, sizes and matrix), float32, "
        f"-n {ITERS} -w {WARMUP}, {args.rounds} interleaved rounds; times in us (best round), "
        "ratios: medians over rounds"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for nranks in args.nranks:
            for collective in COLLECTIVES:
                points = Path(tmp) / f"{collective}-{nranks}.bin"
                write_points(nranks, collective, points)
                for mode in MODES:
                    ours, here, program_a, program_b = [], [], [], []
                    for _ in range(args.rounds):
                        ref_a = c_times(nranks, collective, mode, program, points)
                        time.sleep(PAUSE_S)
                        got = commbench_times(nranks, collective, mode, Path(tmp) / "r.jsonl")
                        time.sleep(PAUSE_S)
                        ref_b = c_times(nranks, collective, mode, program, points)
                        time.sleep(PAUSE_S)
                        ours.append([got[s][0] for s in SIZES])
                        here.append([got[s][0] / got[s][1] for s in SIZES])
                        program_a.append([ref_a[s] for s in SIZES])
                        program_b.append([ref_b[s] for s in SIZES])
                    ours, program_a, program_b = map(np.array, (ours, program_a, program_b))
                    vs_here = np.median(here, axis=0)
                    vs_program = np.median(ours / ((program_a + program_b) / 2), axis=0)
                    c_vs_c = np.median(program_a / program_b, axis=0)
                    best, best_c = ours.min(axis=0), np.minimum(program_a, program_b).min(axis=0)
                    worst = max(worst, float(vs_here.max()), float(vs_program.max()))
                    floor = max(floor, float(np.abs(c_vs_c - 1).max()))
                    print(f"# {collective} {nranks} ranks, {mode} timing "
                          f"({TIME_REDUCTION[collective]} over ranks)")  # fmt: skip
                    print(f"  {'size(B)':>9s} {'commbench':>10s} {'C program':>10s} "
                          f"{'vs C here':>10s} {'vs C program':>13s} {'C / C':>7s}")  # fmt: skip
                    rows = zip(SIZES, best, best_c, vs_here, vs_program, c_vs_c, strict=True)
                    for size, us, c_us, r_here, r_prog, r_cc in rows:
                        flag = "" if max(r_here, r_prog) <= LIMIT else f"  > {LIMIT}"
                        print(f"  {size:9d} {us:10.2f} {c_us:10.2f} {r_here:10.3f} "
                              f"{r_prog:13.3f} {r_cc:7.3f}{flag}")  # fmt: skip
                    sys.stdout.flush()
    print(f"# worst commbench/C: {worst:.3f} (target <= {LIMIT}); the C program against "
          f"itself (C / C) moved up to {floor:.3f} from 1")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
