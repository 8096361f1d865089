"""Start multi-rank jobs from tests: ``mpiexec`` as a subprocess, always with a timeout.

Which ``mpiexec`` and the environment MPI runs in here are :mod:`commbench.launch`'s; the
tests add only that an idle rank yields its core (8-12 ranks share 2 cores in CI).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from commbench.launch import find_mpiexec, local_env

ROOT = Path(__file__).resolve().parents[1]

#: Test-only: ranks waiting in MPI give their core to the ranks that have work.
TEST_MPI_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1"}


def mpiexec() -> str:
    """The launcher :func:`commbench.launch.find_mpiexec` finds (``$MPIEXEC``, the PyPI
    MPI wheel's next to this Python, or PATH's)."""
    found = find_mpiexec()
    if not found:
        raise RuntimeError("no mpiexec: run `make test` (it installs the MPI wheel)")
    return found


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """:func:`commbench.launch.local_env` (Open MPI or MPICH on a small shared machine, as
    root or not), idle ranks yielding, then ``extra``."""
    env = local_env()
    for key, value in TEST_MPI_ENV.items():
        env.setdefault(key, value)
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
    cmd = [mpiexec(), "-n", str(nranks), sys.executable, *args]
    with subprocess.Popen(
        cmd,
        env=mpi_env(env),
        cwd=cwd or ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            # the ranks too, not only mpiexec: they would hold the output pipes open
            os.killpg(proc.pid, signal.SIGKILL)
            exc.stdout, exc.stderr = proc.communicate()
            raise
        except BaseException:  # pytest-timeout, Ctrl-C: no rank outlives the test
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


class DriverRuns:
    """Several ``commbench run`` invocations in one MPI job (``tests/scripts/driver_runs.py``):
    each run's printed table and exit status, by label."""

    START, END = "=== RUN ", "=== END "  # the script's markers (it imports nothing of tests)

    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.proc = proc
        self.tables: dict[str, list[str]] = {}
        self.status: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        label = None
        for line in proc.stdout.splitlines(keepends=True):
            if line.startswith(self.START):
                label = line[len(self.START) :].strip()
                self.tables[label] = []
            elif line.startswith(self.END):
                done, status, seconds = line[len(self.END) :].rsplit(None, 2)
                self.status[done], self.seconds[done] = int(status), float(seconds)
                label = None
            elif label is not None:
                self.tables[label].append(line)

    def stdout(self, label: str) -> str:
        """What ``commbench run`` printed for ``label``; fails the test unless it ran to
        the end and exited 0."""
        why = f"job exit status {self.proc.returncode}:\n{self.proc.stderr[-3000:]}"
        assert label in self.status, f"run {label!r} did not finish; {why}"
        text = "".join(self.tables.get(label, []))
        assert self.status[label] == 0, f"run {label!r} exited {self.status[label]}:\n{text}{why}"
        return text


def run_driver(
    nranks: int, runs: dict[str, list[str]], folder: Path, timeout: float = 240
) -> DriverRuns:
    """Run each ``commbench run ARGS...`` of ``runs`` (label -> ARGS, in order) in one
    ``nranks``-rank job; ``folder`` holds the list of runs."""
    spec = Path(folder) / "driver-runs.json"
    spec.write_text(json.dumps(runs))
    script = str(ROOT / "tests" / "scripts" / "driver_runs.py")
    try:
        return DriverRuns(run_mpi(nranks, [script, str(spec)], timeout=timeout))
    except subprocess.TimeoutExpired as exc:  # the runs that finished still count
        stderr = f"{exc.stderr}\n(no end after {timeout:g} s: the job was killed)"
        return DriverRuns(subprocess.CompletedProcess(exc.cmd, 124, exc.stdout, stderr))


class DriverJobs:
    """``commbench run`` invocations (or ``--script PATH ARGS...``) declared by the test
    modules (label -> (ranks, ARGS)), run in as few MPI jobs as there are rank counts, each
    job when a test first asks for one of its runs. ``{tmp}`` in ARGS is :attr:`tmp`, a
    folder of the test session."""

    def __init__(self, runs: dict[str, tuple[int, list[str]]], tmp: Path) -> None:
        self.tmp = Path(tmp)
        self.runs = {label: (n, [a.replace("{tmp}", str(tmp)) for a in args])
                     for label, (n, args) in runs.items()}  # fmt: skip
        self.jobs: dict[int, DriverRuns] = {}

    def stdout(self, label: str) -> str:
        """What the run ``label`` printed; fails the test unless it exited 0."""
        assert label in self.runs, f"no run {label!r} declared in a selected test module"
        nranks = self.runs[label][0]
        if nranks not in self.jobs:
            plan = {k: args for k, (n, args) in self.runs.items() if n == nranks}
            folder = self.tmp / f"job-{nranks}-ranks"
            folder.mkdir(exist_ok=True)
            self.jobs[nranks] = run_driver(nranks, plan, folder, timeout=280)
        return self.jobs[nranks].stdout(label)
