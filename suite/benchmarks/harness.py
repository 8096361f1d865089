"""The harness's own overhead: ``commbench run``'s reported all-reduce latency next to a
bare mpi4py loop timing the same ``MPI_Allreduce``, in the same run, rounds interleaved.

``python -m commbench.benchmarks.harness [NP]`` (``make bench``) starts itself on NP ranks
(default 8), or runs under the launcher that started it.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

SIZES = (8, 64 * 1024)
ROUNDS = 7
ITERS = 400


def bare_loop_us(comm, size: int, iters: int) -> float:
    """The same call the ``mpi`` implementation makes, in a plain timed loop."""
    from mpi4py import MPI

    send = np.ones(size // 4, dtype=np.float32)
    recv = np.empty_like(send)
    for _ in range(5):
        comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(iters):
        comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
    return (MPI.Wtime() - t0) / iters * 1e6


def main(argv: list[str]) -> int:
    from commbench.launch import relaunch, under_launcher

    if not under_launcher():
        ranks = int(argv[0]) if argv else 8
        return relaunch(ranks, "commbench.benchmarks.harness", [], timeout=600)
    from commbench.harness.driver import Sweep, add_arguments, make_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["allreduce", "--impl", "mpi", "-b", "8", "-e", "8", "-n", str(ITERS),
         "-w", "5", "-c", "0"]
    )  # fmt: skip
    sweep = Sweep(make_config(args))
    comm = sweep.topo.world
    rows = []
    for size in SIZES:
        harness, bare = [], []
        for _ in range(ROUNDS):
            mine = sweep._measure(0, None, size, 4)["time_us"]
            harness.append(np.mean(comm.allgather(mine)))  # -a 1: average over ranks
            bare.append(np.mean(comm.allgather(bare_loop_us(comm, size, ITERS))))
        rows.append((size, float(np.median(harness)), float(np.median(bare))))
    if comm.rank == 0:
        print(
            f"# harness overhead: MPI_Allreduce on {comm.size} ranks, float32, "
            f"{ITERS} calls x {ROUNDS} interleaved rounds, median of rounds, avg over ranks"
        )
        print(f"# {'size':>8s} {'commbench(us)':>14s} {'bare loop(us)':>14s} {'ratio':>7s}")
        for size, h, b in rows:
            print(f"  {size:8d} {h:14.2f} {b:14.2f} {h / b:7.3f}")
        sys.stdout.flush()
    sweep.transport.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
