"""The native timed loop (``commbench.kernels.native``): the same bytes as mpi4py's calls,
the standalone C reference program, ``--reference c``, the host time of every record, and
refusing cleanly where no ``mpicc`` exists."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest

from commbench.harness import metrics
from commbench.kernels import native
from tests.mpirun import ROOT, mpi_env, mpiexec, run_mpi

DRIVER_RUNS = {
    "reference-allreduce": (8, [
        "allreduce", "--impl", "mpi", "-b", "1K", "-e", "64K", "-f", "8", "-n", "5", "-w", "1",
        "--timing", "latency", "--reference", "c", "--out", "{tmp}/ref-allreduce.jsonl"]),
    "reference-fanout": (8, [
        "alltoallv", "--impl", "fanout", "--gpus-per-node", "4", "-b", "1K", "-e", "16K",
        "-f", "4", "-n", "3", "-w", "1", "--workload", "random@3", "--reference", "c",
        "--out", "{tmp}/ref-fanout.jsonl"]),
    "mpi-python-loop": (8, [
        "allreduce", "--impl", "mpi", "--param", "loop=python", "-b", "1K", "-e", "1K",
        "-n", "3", "-w", "1", "--out", "{tmp}/python-loop.jsonl"]),
    "mpi-native-bf16": (8, [
        "allreduce", "--impl", "mpi", "-d", "bf16", "-b", "2", "-e", "8K", "-f", "64",
        "-n", "3", "-w", "1", "--out", "{tmp}/native-bf16.jsonl"]),
}  # fmt: skip


def records(path) -> pd.DataFrame:
    return pd.read_json(path, lines=True)


def test_native_calls_move_what_mpi4py_moves():
    proc = run_mpi(3, ["tests/scripts/native_check.py"], timeout=180)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["checks"] == {
        "allreduce-float32": True, "allreduce-bfloat16": True, "alltoallv": True,
        "alltoall": True, "persistent": True, "rounds": True, "ticks": True,
    }  # fmt: skip
    assert report["latency_samples"] == 3


def test_standalone_reference_program_times_every_point(tmp_path):
    """The C program (no Python in its processes) reads the benchmark's points file."""
    from commbench.harness.workloads import generate

    program = native.build(program=True)
    points = tmp_path / "points.bin"
    traffic = generate("zipf:0.8@5", 2, 4096, seed=1, unit=4)
    native.write_points(points, 2, [("allreduce", 1024, 4, None), ("alltoall", 4096, 4, None),
                                    ("alltoallv", 4096, 4, traffic)])  # fmt: skip
    proc = subprocess.run([mpiexec(), "-n", "2", str(program), str(points), "latency", "5", "1"],
                          env=mpi_env(), cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    assert [int(r[0]) for r in rows] == [1024, 4096, 4096]
    assert all(0 < float(r[1]) <= float(r[2]) for r in rows)  # mean <= max over ranks


def test_reference_c_is_recorded_beside_commbench_time(driver_runs):
    stdout = driver_runs.stdout("reference-allreduce")
    df = records(driver_runs.tmp / "ref-allreduce.jsonl")
    assert (df.nwrong == 0).all() and (df.timed_loop == "native").all()
    assert (df.reference == "c").all() and (df.reference_time_us > 0).all()
    assert all(len(r) == 8 for r in df.rank_reference_us)
    # timed before and after commbench's calls: a rank's reference is the pair's mean
    for pairs, means in zip(df.rank_reference_pair_us, df.rank_reference_us, strict=True):
        assert np.array(pairs).shape == (8, 2) and (np.array(pairs) > 0).all()
        assert np.allclose(np.mean(pairs, axis=1), means)
    assert "C ref" in stdout and "x C" in stdout
    fanout = records(driver_runs.tmp / "ref-fanout.jsonl")
    driver_runs.stdout("reference-fanout")
    assert (fanout.nwrong == 0).all() and (fanout.timed_loop == "python").all()
    assert (fanout.reference_time_us > 0).all()
    # the cpu backend issues each call in full: host time is the call's time, never "bound"
    assert fanout.host_bound.isna().all()
    assert np.allclose(fanout.host_us, fanout.time_us, rtol=0.5)


def test_mpi_loop_python_or_native_and_user_reductions(driver_runs):
    driver_runs.stdout("mpi-python-loop")
    df = records(driver_runs.tmp / "python-loop.jsonl")
    assert list(df.timed_loop) == ["python"]
    assert df["info"][0]["mpi_timed_loop"] == "python: asked for (--param loop=python)"
    driver_runs.stdout("mpi-native-bf16")
    df = records(driver_runs.tmp / "native-bf16.jsonl")
    assert (df.timed_loop == "native").all() and (df.nwrong == 0).all() and len(df) == 3


def test_host_bound_only_on_gpu_backends():
    assert metrics.host_bound("cpu", np.array([5.0]), np.array([5.0])) is None
    assert metrics.host_bound("cuda", np.array([1.0, 9.8]), np.array([10.0, 10.0])) is True
    assert metrics.host_bound("cuda", np.array([1.0, 2.0]), np.array([10.0, 10.0])) is False


def test_no_mpicc_is_one_clear_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("MPICC", str(tmp_path / "no-such-mpicc"))
    monkeypatch.setenv("COMMBENCH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(native.NativeUnavailable, match="cannot run .*no-such-mpicc"):
        native.build()
    assert not any((tmp_path / "cache").glob("cloop-*"))  # nothing half-made


def test_reference_c_refusal_is_said_once_for_the_job(tmp_path):
    """Every rank checks (each builds its own loop), rank 0 says the first reason, once."""
    env = {"MPICC": str(tmp_path / "no-such-mpicc"), "COMMBENCH_CACHE": str(tmp_path / "cache")}
    argv = ["-m", "commbench", "run", "allreduce", "--impl", "mpi", "-b", "1K", "-e", "1K",
            "-n", "2", "--reference", "c", "--out", str(tmp_path / "r.jsonl")]  # fmt: skip
    proc = run_mpi(3, argv, timeout=120, env=env)
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if line.startswith("commbench")]
    assert len(said) == 1 and "--reference c cannot run here" in said[0], proc.stderr
    assert not (tmp_path / "r.jsonl").exists()  # nothing half-written


def test_points_file_layout(tmp_path):
    path = tmp_path / "p.bin"
    traffic = np.arange(4).reshape(2, 2)
    native.write_points(path, 2, [("allreduce", 64, 4, None), ("alltoallv", 8, 1, traffic)])
    words = np.fromfile(path, dtype="<i8").tolist()
    assert words == [2, 2, 0, 64, 4, 2, 8, 1, 0, 1, 2, 3]
