"""FAST and the all-to-allv baselines under mpiexec, in one 8-rank launch
(``tests/scripts/fast_alltoallv_check.py``): byte-exact parity with MPI_Alltoallv for
G in {1, 2, 4, 8} and every workload and corner case; mismatched plans refused on every
rank before anything is sent; 1000 calls with a new matrix each, without growth."""

from __future__ import annotations

import json

import pytest

from commbench.kernels.fast import warmup
from tests.mpirun import ROOT, run_mpi

CALLS = 1000


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    warmup()  # compile or load the numba core here once, not in 8 ranks at a time
    tmp = tmp_path_factory.mktemp("fastmpi")
    out = tmp / "report.json"
    proc = run_mpi(8, [str(ROOT / "tests/scripts/fast_alltoallv_check.py"), str(out), str(tmp),
                       "parity", "refuse", "churn", "--calls", str(CALLS)], timeout=280)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


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
