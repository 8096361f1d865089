"""``commbench sweep``: the arguments of the local sweep behind ``make run``
(:mod:`commbench.sweep.sweep`)."""

from __future__ import annotations

from commbench.launch import find_mpiexec
from commbench.sweep.sweep import run_sweep


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run every registered implementation locally (what `make run` does)",
        description="Launch `commbench run` under mpiexec for each implementation of "
        "allreduce, alltoallv, allgather, reducescatter and broadcast on the chosen backend, "
        "writing one JSONL file.",
    )
    p.add_argument("--np", type=int, default=8, help="MPI ranks (default 8)")
    p.add_argument("--gpus-per-node", type=int, default=4, help="emulated GPUs per node")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--out-dir", default="results/local", help="a new run folder goes here")
    p.add_argument(
        "--mpiexec",
        default=find_mpiexec() or "mpiexec",
        help="launcher (default: $MPIEXEC, else the mpiexec next to this Python)",
    )
    p.add_argument("--timeout", type=float, default=600, help="seconds per launch")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="K",
        help="launch every implementation K times, interleaved (A B C A B C ...); the "
        "records of a point merge into one interval (default 1)",
    )
    p.add_argument(
        "--cluster",
        default=None,
        metavar="PREFIX",
        help="run on the emulated cluster PREFIX (`commbench cluster up`): its nodes and "
        "NICs, not --np/--gpus-per-node",
    )
    p.add_argument(
        "--no-report", action="store_true", help="skip the modelled tables, figures and report"
    )
    p.set_defaults(func=run_sweep)
