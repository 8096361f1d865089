"""``fast --param tune=model``: the cost model picks FAST's options per traffic matrix for
the run's ``--system`` profile (rank 0 tunes, every rank schedules with the result)."""

from __future__ import annotations

import json

import pytest

from commbench.kernels.fast.impls import NO_STAGES
from tests.mpirun import run_mpi


def test_tune_model_picks_options_every_rank_runs_and_keeps_explicit_ones(tmp_path):
    out = tmp_path / "tuned.jsonl"
    proc = run_mpi(4, ["-m", "commbench", "run", "alltoallv", "--impl", "fast",
                       "--gpus-per-node", "2", "-b", "64K", "-e", "256K", "-f", "4", "-n", "2",
                       "-w", "1", "--workload", "zipf:0.8", "--system", "local-cluster",
                       "--param", "tune=model", "--param", "max_stages=3",
                       "--out", str(out)], timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 2 and all(r["nwrong"] == 0 for r in recs)
    for r in recs:
        tuning = r["info"]["tuning"]
        assert r["info"]["tuned"] is True and r["info"]["options"] == tuning["options"]
        assert tuning["by"] == "model" and tuning["fabric"].endswith("local-cluster.toml")
        assert tuning["options"]["max_stages"] == 3  # an explicit option is never varied
        assert tuning["candidates"] >= 2 and tuning["best_time_us"] <= tuning["default_time_us"]
        if tuning["options"].get("tail_penalty") == NO_STAGES["tail_penalty"]:
            assert r["info"]["stages"] == 0  # the no-stage candidate: balancing + tail


@pytest.mark.parametrize(
    "param, message",
    [
        ("tune=model", "tune=model needs"),
        ("tune=maybe", "--param tune=maybe: choose none or model"),
    ],
)
def test_tune_bad_input_is_refused(tmp_path, param, message):
    """The same one line from each rank (as every bad ``run`` argument), nothing written."""
    out = tmp_path / "r.jsonl"
    proc = run_mpi(2, ["-m", "commbench", "run", "alltoallv", "--impl", "fast", "--param",
                       param, "-b", "1K", "-e", "1K", "--out", str(out)])  # fmt: skip
    assert proc.returncode != 0 and not out.exists()
    said = [line for line in proc.stderr.splitlines() if message in line]
    assert said and set(said) == {said[0]} and said[0].startswith("commbench run: error"), (
        proc.stderr
    )
