"""Starting ranks from Python on one machine: which ``mpiexec``, the environment in which
Open MPI or MPICH runs here, and relaunching a module under it. The one home of these
facts: the sweep, the benchmarks, the GPU check, the emulated cluster and the tests use it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: What Open MPI needs on these machines: run as root (CI), and no UCX one-sided component
#: (it prints errors on machines without an RDMA device). Harmless for MPICH.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_osc": "^ucx",
}
#: More ranks than cores on one machine (``make run``, the benchmarks, the tests).
OVERSUBSCRIBE_ENV = {
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
}
#: Ranks of several emulated nodes sharing this machine's cores: an idle rank yields its
#: core and no rank is bound to one.
SHARED_CORES_ENV = {
    "OMPI_MCA_mpi_yield_when_idle": "1",
    "OMPI_MCA_hwloc_base_binding_policy": "none",
    "PRTE_MCA_hwloc_default_binding_policy": "none",
}
LOCAL_MPI_ENV = {**MPI_ENV, **OVERSUBSCRIBE_ENV}
CLUSTER_MPI_ENV = {**MPI_ENV, **SHARED_CORES_ENV}

#: Set by the launchers in every rank (checked without initialising MPI).
_LAUNCHED = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID", "PALS_RANKID")


def find_mpiexec() -> str | None:
    """``$MPIEXEC``, else the one next to this Python (the PyPI MPI wheel), else PATH's; as
    an absolute path (a command may start ranks in another folder)."""
    launcher = os.environ.get("MPIEXEC") or str(Path(sys.executable).parent / "mpiexec")
    return os.path.abspath(launcher) if Path(launcher).exists() else shutil.which("mpiexec")


def is_open_mpi(launcher: str) -> bool:
    """Whether ``launcher`` is Open MPI's (it takes ``--oversubscribe``)."""
    try:
        text = subprocess.run(
            [launcher, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in text or "OpenRTE" in text or "PRRTE" in text


def local_env() -> dict[str, str]:
    """This process's environment plus :data:`LOCAL_MPI_ENV` (values already set win),
    and unbuffered output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for key, value in LOCAL_MPI_ENV.items():
        env.setdefault(key, value)
    return env


def under_launcher() -> bool:
    """True when started by mpiexec/srun (checked without initialising MPI)."""
    return any(v in os.environ for v in _LAUNCHED)


def launched_rank() -> int:
    """This process's rank from its launcher's environment, read before MPI starts; 0
    where no launcher started it."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "PALS_RANKID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def relaunch(np_: int, module: str, argv: list[str], timeout: float) -> int:
    """Run ``python -m module argv...`` on ``np_`` local ranks; returns the exit status
    (124 when it ran past ``timeout`` seconds)."""
    cmd = [find_mpiexec() or "mpiexec", "-n", str(np_), sys.executable, "-m", module, *argv]
    try:
        return subprocess.run(cmd, env=local_env(), timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"{module}: no result after {timeout:g} s, stopped", file=sys.stderr)
        return 124


def terminate(
    live: Callable[[], list[int]],
    grace_s: float,
    poll_s: float = 0.1,
    reap: Callable[[], object] | None = None,
) -> None:
    """SIGTERM the processes ``live()`` names, wait up to ``grace_s`` for ``live()`` to
    come back empty, then the same with SIGKILL. ``reap`` (e.g. ``Popen.poll``) runs while
    waiting, so a child of ours does not linger as a zombie."""
    pids = live()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            if reap is not None:
                reap()
            time.sleep(poll_s)
            pids = live()
        if not pids:
            return
