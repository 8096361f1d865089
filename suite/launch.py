"""Starting ranks from Python on one machine: which ``mpiexec``, and an environment in
which Open MPI or MPICH runs there (as root, oversubscribed, no UCX one-sided component),
Used by the benchmarks and ``make gpu-check``."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

LOCAL_MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_osc": "^ucx",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
}


def find_mpiexec() -> str | None:
    """``$MPIEXEC``, else the one next to this Python (the PyPI MPI wheel), else PATH's."""
    launcher = os.environ.get("MPIEXEC") or str(Path(sys.executable).parent / "mpiexec")
    return launcher if Path(launcher).exists() else shutil.which("mpiexec")


def local_env() -> dict[str, str]:
    """This process's environment plus :data:`LOCAL_MPI_ENV` (values already set win),
    and unbuffered output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for key, value in LOCAL_MPI_ENV.items():
        env.setdefault(key, value)
    return env
