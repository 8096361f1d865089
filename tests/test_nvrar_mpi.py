"""NVRAR on the cpu backend, several ranks: equal to MPI_Allreduce for every node count
and G, many calls without clearing, a missing rank times out, and the driver's runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.mpirun import run_mpi

WORKER = "tests/nvrar_mpi_worker.py"


def _result(nranks: int, args: list[str], timeout: float = 240) -> dict:
    proc = run_mpi(nranks, [WORKER, *args], timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.parametrize(
    "nranks,shapes",
    [
        # nodes x gpus_per_node on sub-communicators of one launch: N in 1,2,3,4,5,8 with
        # G=1, N in 1..4 with G=2, N in 1,2 with G=4, and G=3, G=8 ...
        (8, "1x1,2x1,3x1,4x1,5x1,8x1,1x2,2x2,3x2,4x2,1x4,2x4,2x3,1x8"),
        # ... and the shapes that need more ranks: 5 nodes x 2, 3 nodes x 4
        (12, "5x2,3x4"),
    ],
    ids=["8ranks", "12ranks"],
)
def test_nvrar_equals_mpi_allreduce(nranks, shapes):
    # fp32/fp16/bf16 within tolerance, int32 exactly (sum and max); counts below G, even
    # and odd; two calls per buffer with new data; one chunk and 3-cell chunks.
    res = _result(nranks, ["matrix", "nvrar,nvrar[chunk_bytes=12]", shapes])
    assert res["problems"] == []
    assert res["cases"] >= 120


def test_nvrar_10000_calls_without_clearing():
    # 3 nodes x 1 (fold-in, exchange and fold-out credits: the intra-node collectives keep
    # no state between calls), alternating between two sizes: every call has new data and
    # is checked exactly; each window saw 5000 calls.
    res = _result(3, ["repeat", "3", "1", "10000"])
    assert res["wrong"] == 0
    assert res["seqs"] == [[5000, 5000]]


def test_absent_rank_times_out_naming_step_and_partner():
    res = _result(4, ["timeout", "4", "3"], timeout=60)
    errors = {r["rank"]: r.get("error") for r in res["ranks"]}
    assert res["ranks"][3].get("absent")
    assert "step 0 (exchange) for data from partner rank 3" in errors[2]
    assert "step 1 (exchange) for data from partner rank 3" in errors[1]
    assert "step 1 (exchange) for data from partner rank 2" in errors[0]
    for r in res["ranks"][:3]:
        assert 0.9 < r["seconds"] < 10, r


@pytest.mark.parametrize(
    "nranks,g,maxbytes", [(6, 2, "2M"), (8, 1, "512K")], ids=["3nodes_x2", "8nodes_x1"]
)
def test_driver_runs_nvrar_without_wrong_results(tmp_path, nranks, g, maxbytes):
    # The "done when" runs, with fewer iterations (8 x 1 stops at 512K: recursive
    # doubling of 2 MiB on 8 ranks takes long on 2 cores; the full range was run by hand).
    out = tmp_path / "F.jsonl"
    args = ["-m", "commbench", "run", "allreduce", "--impl", "nvrar", "--gpus-per-node", str(g),
            "-d", "bf16", "-b", "64K", "-e", maxbytes, "-c", "1", "-n", "2", "-w", "1",
            "--out", str(out)]  # fmt: skip
    proc = run_mpi(nranks, args, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_json(out, lines=True)
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
