"""Suite-wide set-up: FAST's numba core compiled in another process while the tests
that do not use it run, and the shared MPI jobs (``driver_runs``, ``allreduce_checks``)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpirun import DriverJobs, run_mpi

#: Test modules that use FAST's numba core in no process, theirs or a child's (run alone
#: with an empty ``NUMBA_CACHE_DIR``, they leave it empty). They run first, while another
#: process compiles the core (fresh checkout: about a minute on one core) or loads it; a
#: test of one that scheduled would compile it a second time, here or in its ranks.
FAST_FREE = {
    "test_allreduce_algorithms", "test_analysis", "test_analysis_blocks", "test_analysis_data",
    "test_blocks", "test_analysis_notebooks", "test_analysis_run", "test_cluster_plan", "test_external",
    "test_external_json",
    "test_gpu_paths", "test_harness_units", "test_jobs", "test_layers", "test_nvrar_units",
    "test_nvshmem_rail_fake", "test_reliability", "test_workloads",
}  # fmt: skip

_compiling: subprocess.Popen | None = None


def _fast_free(item) -> bool:
    return Path(str(getattr(item, "path", ""))).stem in FAST_FREE


def pytest_sessionstart(session):
    global _compiling
    _compiling = subprocess.Popen(
        [sys.executable, "-c", "from commbench.kernels.fast import warmup; warmup()"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: not _fast_free(item))  # stable: otherwise in file order


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before a test that may schedule, and before its fixtures: FAST's numba core is
    compiled and loaded here. Otherwise the first test that schedules pays the compile
    inside its own time limits (threaded ranks, mpiexec timeouts) and fails on a fresh
    machine only; and 8 ranks would each compile it at once."""
    global _compiling
    if _fast_free(item):
        return
    if _compiling is not None:
        _compiling.wait()
        _compiling = None
    from commbench.kernels.fast import warmup

    warmup()  # loads what the other process compiled (compiles, had it failed)


def pytest_sessionfinish(session):
    if _compiling is not None and _compiling.poll() is None:  # only FAST-free tests ran
        _compiling.kill()
        _compiling.wait()


def _declared(request, name: str) -> dict:
    """``name``'s entries in every module of the selected tests."""
    found: dict = {}
    for module in dict.fromkeys(getattr(item, "module", None) for item in request.session.items):
        for label, entry in getattr(module, name, {}).items():
            assert found.setdefault(label, entry) == entry, f"{name}: {label!r} declared twice"
    return found


@pytest.fixture(scope="session")
def driver_runs(request, tmp_path_factory) -> DriverJobs:
    """The ``commbench run`` invocations (and test programs: ``--script PATH ARGS...``)
    the selected test modules declare in ``DRIVER_RUNS`` (label -> (ranks, ARGS)), one
    MPI job per rank count (``tests/scripts/driver_runs.py``): ranks start, import and
    load FAST's numba core slowly on a small machine, once per job instead of once per
    run."""
    return DriverJobs(_declared(request, "DRIVER_RUNS"), tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="session")
def allreduce_checks(request):
    """The multi-rank all-reduce checks of ``tests/nvrar_mpi_worker.py`` that the selected
    tests ask for, all in one job: label -> the check's result.

    A test module lists its checks in ``ALLREDUCE_CHECKS`` (label -> (ranks, the worker's
    task arguments)); the job has as many ranks as the largest asks for, and each check
    runs on the first ranks of it (ranks start slowly on a small machine: one launch
    instead of one per check).
    """
    checks: dict[str, tuple[int, list[str]]] = _declared(request, "ALLREDUCE_CHECKS")
    argv: list[str] = []
    for _, args in checks.values():
        argv += [*args, "--"]
    nranks = max(n for n, _ in checks.values())
    proc = run_mpi(nranks, ["tests/nvrar_mpi_worker.py", *argv[:-1]], timeout=280)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    results = [json.loads(line[len("RESULT ") :]) for line in lines]
    why = f"exit status {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return _Checks(dict(zip(checks, results, strict=False)), proc.returncode, why)


class _Checks:
    def __init__(self, results: dict[str, dict], returncode: int, why: str) -> None:
        self.results, self.returncode, self.why = results, returncode, why

    def __getitem__(self, label: str) -> dict:
        """The result of check ``label``; fails the test unless the job ran to its end."""
        assert label in self.results and self.returncode == 0, f"check {label!r}: {self.why}"
        return self.results[label]
