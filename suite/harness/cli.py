"""``commbench run``: the arguments of the per-rank driver (:mod:`commbench.harness.driver`),
started under ``mpiexec`` / ``srun`` / ``ibrun``. Flags mean what they mean in nccl-tests
(``-b/-e/-f``, ``-n/-w``, ``-c``, algbw/busbw).
"""

from __future__ import annotations

from commbench.harness.driver import add_arguments, run


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="measure one collective implementation over a size sweep (under mpiexec)",
        description="Per-rank benchmark driver; flags follow nccl-tests. Start it with "
        "mpiexec/srun, e.g. `mpiexec -n 8 commbench run alltoallv --impl fanout "
        "--gpus-per-node 4 -b 1K -e 1M --workload random`.",
    )
    add_arguments(p)
    p.set_defaults(func=run)
