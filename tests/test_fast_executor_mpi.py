"""FAST and the all-to-allv baselines under mpiexec, in one 8-rank launch
(``tests/scripts/fast_alltoallv_check.py``, a step of the ``driver_runs`` fixture's 8-rank
job): byte-exact parity with MPI_Alltoallv for G in {1, 2, 4, 8} and every workload and
corner case; mismatched plans refused on every rank before anything is sent; 1000 calls
with a new matrix each, without growth."""

from __future__ import annotations

import json

import pytest

from tests.mpirun import ROOT

CALLS = 1000

#: The check program's parts, in the 8-rank job the ``driver_runs`` fixture starts (label
#: -> (ranks, ARGS)): its ranks start and load FAST's numba core once for several files.
DRIVER_RUNS = {
    "fast-executor-check": (8, [
        "--script", str(ROOT / "tests" / "scripts" / "fast_alltoallv_check.py"),
        "{tmp}/fast-executor/report.json", "{tmp}/fast-executor", "parity", "refuse", "churn",
        "--calls", str(CALLS)]),
}  # fmt: skip


@pytest.fixture(scope="module")
def report(driver_runs):
    driver_runs.stdout("fast-executor-check")
    return json.loads((driver_runs.tmp / "fast-executor" / "report.json").read_text())


def test_byte_exact_with_mpi_alltoallv_for_every_node_size_and_workload(report):
    parity = report["parity"]
    assert parity["failures"] == []
    names = set(parity["matrices"])
    assert {"uniform", "random/9973", "zipf:0.9", "hotspot", "perm-sum", "moe:16,2", "file",
            "all-zero", "hot-pair", "primes"} <= names  # fmt: skip
    # 4 node sizes x every matrix x (4 implementations, + 6 FAST options at G = 2 and 4)
    assert parity["cases"] == len(names) * (4 * 4 + 2 * 6)


def test_mismatched_plans_are_refused_on_every_rank_before_sending(report):
    refuse = report["refuse"]
    expected = {
        "disagree": "ranks hold different traffic matrices (rank 0 and rank 3 differ)",
        "stale_schedule": "the schedule was computed for another traffic matrix",
        "other_node_size": "the schedule is for 1 GPUs per node but the topology has 4",
        "corrupt_plan": "rank 5 refuses the plan: the plan does not write",
        "bad_matrix_one_rank": "ranks hold different traffic matrices (rank 0 and rank 2",
    }
    for label, text in expected.items():
        got = refuse[label]
        assert got["refused_on"] == 8 and got["posted"] == 0, (label, got)
        assert text in got["message"], (label, got["message"])
    assert refuse["after"]["wrong"] == 0 and refuse["after"]["posted"] > 0


def test_a_thousand_calls_with_a_new_matrix_each(report):
    churn = report["churn"]
    assert churn["calls"] == CALLS and churn["wrong"] == 0
    assert churn["rss_growth_bytes"] < 4 << 20, churn
    assert churn["scratch_max_bytes"] < 1 << 20
