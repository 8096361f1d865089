"""``commbench run alltoallv`` with FAST under mpiexec: the issue's 'done when' sweep
(zipf:0.9, 64K..4M, 8 ranks as 2 x 4) with nwrong 0 at every size, and the FAST fields
each record carries (synthesis time, stages, lower bound, scratch memory)."""

from __future__ import annotations

import pandas as pd
import pytest

from commbench.kernels.fast import warmup
from tests.mpirun import run_mpi

SWEEP = ["--gpus-per-node", "4", "--workload", "zipf:0.9", "-b", "64K", "-e", "4M", "-c", "1",
         "-n", "2", "-w", "1"]  # fmt: skip

#: The sweeps of this file (label -> (ranks, ARGS)), run through the CLI in one job with
#: other files' 8-rank runs (the ``driver_runs`` fixture: the ranks start, and load
#: FAST's numba core, once).
DRIVER_RUNS = {
    f"a2a-{label}": (8, ["alltoallv", "--impl", impl, *SWEEP, *extra,
                         "--out", f"{{tmp}}/a2a-{label}.jsonl"])
    for label, (impl, *extra) in {
        "fast": ("fast",),
        "fast+sched": ("fast+sched", "--param", "groups=split", "-e", "256K"),
        "pxn": ("pxn", "-e", "256K"),
        "deepep": ("deepep", "-e", "256K"),
    }.items()
}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def numba_cache():
    warmup()  # compile or load the numba core once here, not in 8 ranks at a time


def sweep(driver_runs, label: str) -> pd.DataFrame:
    driver_runs.stdout(f"a2a-{label}")
    return pd.read_json(driver_runs.tmp / f"a2a-{label}.jsonl", lines=True)


def test_fast_done_when_sweep_is_exact_and_reports_the_schedule(driver_runs):
    df = sweep(driver_runs, "fast")
    assert list(df.size_bytes) == [64 << 10 << k for k in range(7)]
    assert (df.nwrong == 0).all()
    info = pd.DataFrame(list(df["info"]))
    assert (info.stages >= 1).all() and (info.synthesis_us > 0).all()
    assert (info.scheduled_bytes >= info.lower_bound_bytes).all()
    assert info.extra_mem_fraction.between(0.05, 1.0).all()
    assert (info.steps == 3).all()  # balance; intra + the one stage; redistribution
    assert all(len(r) == 8 for r in df.rank_finish_us)


def test_fast_sched_reschedules_every_timed_call(driver_runs):
    df = sweep(driver_runs, "fast+sched")
    assert (df.nwrong == 0).all() and len(df) == 3
    info = pd.DataFrame(list(df["info"]))
    # setup, then warm-up (1) + timed (2) + the loop's untimed edge after them (1) +
    # finish (1) + checked (1) calls
    assert (info.calls == 6).all() and (info.per_call_schedule_us > 0).all()
    assert (info.groups == "split").all()


def test_bad_param_is_one_line_on_every_rank():
    proc = run_mpi(2, ["-m", "commbench", "run", "alltoallv", "--impl", "fast", "--param",
                       "strategy=greedy", "-b", "1K", "-e", "1K"], timeout=60)  # fmt: skip
    assert proc.returncode != 0
    assert "error: ValueError: unknown strategy 'greedy'" in proc.stderr


@pytest.mark.parametrize("impl", ["pxn", "deepep"])
def test_relay_fanouts_match_mpi_alltoallv(driver_runs, impl):
    df = sweep(driver_runs, impl)
    assert (df.nwrong == 0).all() and len(df) == 3
    assert all(info["steps"] == 2 for info in df["info"])
