"""NVRAR on the cpu backend, several ranks: equal to MPI_Allreduce for every node count
and G, many calls without clearing, a missing rank times out, and the driver's runs."""

from __future__ import annotations

import pandas as pd
import pytest

#: Run by tests/nvrar_mpi_worker.py in the job the ``allreduce_checks`` fixture starts
#: (label -> (ranks, task)), each check on the first ranks of that job.
ALLREDUCE_CHECKS = {
    # nodes x gpus_per_node on sub-communicators of one launch: N in 1,2,3,4,5,8 with
    # G=1, N in 1..4 with G=2, N in 1,2 with G=4, and G=3, G=8 ...
    "nvrar/8ranks": (8, ["matrix", "nvrar,nvrar[chunk_bytes=12]",
                         "1x1,2x1,3x1,4x1,5x1,8x1,1x2,2x2,3x2,4x2,1x4,2x4,2x3,1x8"]),
    # ... and the shapes that need more ranks: 5 nodes x 2, 3 nodes x 4
    "nvrar/12ranks": (12, ["matrix", "nvrar,nvrar[chunk_bytes=12]", "5x2,3x4"]),
    "nvrar/repeat": (3, ["repeat", "3", "1", "10000"]),
    "nvrar/timeout": (4, ["timeout", "4", "3"]),
}  # fmt: skip


@pytest.mark.parametrize("ranks", ["8ranks", "12ranks"])
def test_nvrar_equals_mpi_allreduce(allreduce_checks, ranks):
    # fp32/fp16/bf16 within tolerance, int32 exactly (sum and max); counts below G, even
    # and odd; two calls per buffer with new data; one chunk and 3-cell chunks.
    res = allreduce_checks[f"nvrar/{ranks}"]
    assert res["problems"] == []
    assert res["cases"] >= 120


def test_nvrar_10000_calls_without_clearing(allreduce_checks):
    # 3 nodes x 1 (fold-in, exchange and fold-out credits: the intra-node collectives keep
    # no state between calls), alternating between two sizes: every call has new data and
    # is checked exactly; each window saw 5000 calls.
    res = allreduce_checks["nvrar/repeat"]
    assert res["wrong"] == 0
    assert res["seqs"] == [[5000, 5000]]


def test_absent_rank_times_out_naming_step_and_partner(allreduce_checks):
    res = allreduce_checks["nvrar/timeout"]
    errors = {r["rank"]: r.get("error") for r in res["ranks"]}
    assert res["ranks"][3].get("absent")
    assert "step 0 (exchange) for data from partner rank 3" in errors[2]
    assert "step 1 (exchange) for data from partner rank 3" in errors[1]
    assert "step 1 (exchange) for data from partner rank 2" in errors[0]
    for r in res["ranks"][:3]:
        assert 0.9 < r["seconds"] < 10, r


#: The issue's "done when" runs (label -> ranks, G, largest size), with fewer iterations
#: (8 x 1 stops at 512K: recursive doubling of 2 MiB on 8 ranks takes long on 2 cores; the
#: full range was run by hand) ...
DONE_WHEN = {"3nodes_x2": (6, 2, "2M"), "8nodes_x1": (8, 1, "512K")}
#: ... through the CLI in the ``driver_runs`` fixture's jobs (the 8-rank one shared with
#: other files): label -> (ranks, ARGS).
DRIVER_RUNS = {
    f"nvrar-{label}": (nranks, [
        "allreduce", "--impl", "nvrar", "--gpus-per-node", str(g), "-d", "bf16", "-b", "64K",
        "-e", maxbytes, "-c", "1", "-n", "2", "-w", "1", "--out", f"{{tmp}}/nvrar-{label}.jsonl"])
    for label, (nranks, g, maxbytes) in DONE_WHEN.items()
}  # fmt: skip


@pytest.mark.parametrize("label", list(DONE_WHEN))
def test_driver_runs_nvrar_without_wrong_results(driver_runs, label):
    nranks, g, maxbytes = DONE_WHEN[label]
    driver_runs.stdout(f"nvrar-{label}")
    df = pd.read_json(driver_runs.tmp / f"nvrar-{label}.jsonl", lines=True)
    top = {"2M": 6, "512K": 4}[maxbytes]
    assert sorted(df["size_bytes"]) == [65536 << k for k in range(top)]
    assert (df["nwrong"] == 0).all()
    assert (df["nodes"] == nranks // g).all()
    info = df["info"].iloc[0]
    assert info["inter_node_steps"] == 3  # 3 nodes: fold-in, 1 exchange, fold-out; 8: 3


def test_benchmark_table_starts_itself_and_checks_results():
    # `make bench` runs the module without mpiexec: it must start itself, measure every
    # implementation and report #wrong 0 (tiny settings: this is a smoke run, not numbers).
    import subprocess
    import sys

    from tests.mpirun import ROOT, mpi_env

    env = {k: v for k, v in mpi_env().items() if not k.startswith(("OMPI_COMM_", "PMIX_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "commbench.benchmarks.nvrar", "--np", "4", "--gpus-per-node", "2",
         "-n", "1", "-w", "0", "--rounds", "1", "--impls", "nvrar,mpi,ring"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [line.split() for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert [r[0] for r in rows] == ["64K", "128K", "256K", "512K", "1M", "2M"]
    assert all(r[-1] == "0" for r in rows)  # #wrong
    assert "max over ranks" in proc.stdout and "2 emulated nodes x 2" in proc.stdout


@pytest.mark.parametrize("np_, rows", [(4, 3), (2, 0)])
def test_benchmark_step_puts_the_put_point_beside_nvrar_s_step(np_, rows):
    # 2 nodes of 2 ranks: the put point and NVRAR's step at 256 B and 4 KiB, a number per
    # round; one node has no inter-node step: one line, exit 2
    import subprocess
    import sys

    from tests.mpirun import ROOT, mpi_env

    env = {k: v for k, v in mpi_env().items() if not k.startswith(("OMPI_COMM_", "PMIX_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "commbench.benchmarks.nvrar", "step", "--np", str(np_),
         "--gpus-per-node", "2", "--rounds", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    if not rows:
        assert proc.returncode != 0 and "step: need at least 2 nodes of 2 ranks" in proc.stderr
        return
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [ln.split(":") for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    assert [name.strip() for name, _ in lines] == ["put point", "nvrar 256 B", "nvrar 4096 B"]
    assert all(len(v.split()) == 2 and all(float(x) > 0 for x in v.split()) for _, v in lines)
