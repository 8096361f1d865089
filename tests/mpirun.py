"""Start multi-rank jobs from tests: ``mpiexec`` as a subprocess, always with a timeout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mpiexec() -> str:
    """The ``mpiexec`` next to this Python (the PyPI MPI wheel) or on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if not found:
        raise RuntimeError("no mpiexec: run `make test` (it installs the MPI wheel)")
    return found


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Open MPI or MPICH on a small shared machine, as root or not."""
    env = dict(os.environ)
    env.update(
        {
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_osc": "^ucx",
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
            "OMPI_MCA_mpi_yield_when_idle": "1",
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def run_mpi(
    nranks: int,
    args: list[str],
    timeout: float = 120,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess:
    """Run ``python ARGS...`` on ``nranks`` ranks; output captured as text.

    ``args`` are Python's arguments, e.g. ``["-m", "commbench", "run", ...]`` or a script path.
    On timeout the whole process group is killed and ``subprocess.TimeoutExpired`` raised.
    """
    cmd = [mpiexec(), "--oversubscribe", "-n", str(nranks), sys.executable, *args]
    return subprocess.run(
        cmd,
        env=mpi_env(env),
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )
