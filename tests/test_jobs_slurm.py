"""Rendered jobs really run: the local profile's script under bash, then under Slurm.

The Slurm tests need `sbatch` and a running local Slurm (``bash jobs/local-slurm.sh
start``). Without them they are skipped with the reason, except under CI (``CI=true``),
where a missing Slurm is a failure: CI must run them.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commbench.jobs.allocation import compute_allocation
from commbench.jobs.experiments import (
    RunCommand,
    custom_experiment,
    load_experiment,
    plan_runs,
    registered_implementations,
)
from commbench.jobs.profile import load_profile
from commbench.jobs.runs import RESULTS_NAME
from commbench.jobs.script import Job, render_job, write_job
from commbench.jobs.site import placeholders, resolve_site

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"
WAIT_S = 240


def render_local(
    tmp_path: Path, run_id: str, external: tuple[str, ...] = (), site_values=None, **step
) -> Job:
    import dataclasses

    profile = load_profile("local")
    available = registered_implementations()
    collective = "alltoallv" if "workload" in step else "allreduce"
    exp = custom_experiment(collective, ["mpi"], "cpu", available, 300, **step)
    if external:
        step = dataclasses.replace(exp.steps[0], external=external)
        exp = dataclasses.replace(exp, steps=(step,))
    places = placeholders(Path(sys.executable).parent)
    site = resolve_site(profile, site_values or {}, {}, {}, 1, places)
    return render_job(
        profile,
        exp,
        compute_allocation(profile, 1, 300),
        site,
        run_id=run_id,
        bindir=Path(sys.executable).parent,
        results_root=tmp_path,
        available=available,
    )


def run_script(job: Job) -> subprocess.CompletedProcess:
    path = write_job(job)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PRTE_"))}
    return subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=120)


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / RESULTS_NAME).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_local_script_runs_without_slurm_and_writes_ready(tmp_path):
    job = render_local(tmp_path, "bash-ok", min="1K", max="4K", iters=3, warmup=1)
    proc = run_script(job)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = job.run_dir
    assert (d / "ready").is_file() and not (d / "error").exists()
    recs = records(d)
    assert [r["size_bytes"] for r in recs] == [1024, 2048, 4096]
    assert {r["system"] for r in recs} == {"local"} and {r["run_id"] for r in recs} == {"bash-ok"}
    assert all(r["nranks"] == 4 and r["gpus_per_node"] == 2 and r["nwrong"] == 0 for r in recs)
    for name in ("job.sh", "env.txt", "module-list.txt", "logs/01-allreduce-mpi.log"):
        assert (d / name).is_file(), name
    assert "COMMBENCH_RUN_ID=bash-ok" in (d / "env.txt").read_text()


def test_failing_step_writes_error_sentinel(tmp_path):
    job = render_local(
        tmp_path, "bash-fail", min="1K", max="1K", iters=1, warmup=0, workload="file:/nonexistent"
    )
    proc = run_script(job)
    assert proc.returncode == 0  # the job itself finishes; the sentinel says what failed
    d = job.run_dir
    assert not (d / "ready").exists()
    error = (d / "error").read_text()
    assert "01-alltoallv-mpi: exit status" in error and "logs/01-alltoallv-mpi.log" in error


# ---------------------------------------------------------------- under Slurm


def need_slurm() -> None:
    """Skip with the reason, or fail under CI, when no local Slurm answers."""
    reason = slurm_missing()
    if reason:
        msg = f"{reason}; start it with `bash jobs/local-slurm.sh start`"
        if IN_CI:
            pytest.fail(f"CI must run the Slurm job tests: {msg}")
        pytest.skip(msg)


@functools.cache
def slurm_missing() -> str | None:
    """Why no local Slurm can take a job, or None (asked once: sinfo retries for seconds)."""
    reason = None
    if not shutil.which("sbatch"):
        reason = "sbatch not found (apt-get install slurm-wlm munge)"
    else:
        proc = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=60
        )
        states = proc.stdout.split()
        if proc.returncode != 0 or not any(s in ("idle", "mixed", "allocated") for s in states):
            return f"no Slurm node up (sinfo: {(proc.stderr or proc.stdout).strip()!r})"
    return reason


def commbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commbench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_local_render_passes_sbatch_test_only(tmp_path):
    need_slurm()
    args = ["jobs", "submit", "--system", "local", "--nodes", "1"]
    proc = commbench(*args, "--experiment", "interconnect", "-o", str(tmp_path), "--test-only")
    assert proc.returncode == 0, proc.stderr
    assert "to start at" in proc.stdout
    assert not list(tmp_path.rglob("job.sh"))  # nothing left behind


def test_submit_interconnect_on_local_slurm(tmp_path):
    need_slurm()
    run_id = f"it-{os.getpid()}"
    args = ["jobs", "submit", "--system", "local", "--nodes", "1", "--run-id", run_id]
    proc = commbench(*args, "--experiment", "interconnect", "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    job_id, printed_run, run_dir = proc.stdout.split()
    assert printed_run == run_id and job_id.isdigit()
    d = Path(run_dir)
    assert d == tmp_path / "local" / run_id
    deadline = time.monotonic() + WAIT_S
    while not ((d / "ready").exists() or (d / "error").exists()):
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id])
            out = "".join(p.read_text() for p in d.glob("slurm-*.out"))
            pytest.fail(f"job {job_id} wrote no sentinel in {WAIT_S} s; output:\n{out[-3000:]}")
        time.sleep(1)
    out = "".join(p.read_text() for p in d.glob("slurm-*.out"))
    assert not (d / "error").exists(), (d / "error").read_text() + out[-3000:]
    assert (d / "job-id").read_text().strip() == job_id
    for name in (
        "job.sh",
        "env.txt",
        "module-list.txt",
        "scontrol-show-job.txt",
        f"slurm-{job_id}.out",
    ):
        assert (d / name).is_file(), name
    assert f"JobId={job_id}" in (d / "scontrol-show-job.txt").read_text()
    recs = records(d)
    planned = {(r.collective, r.impl) for r in render_interconnect_plan(tmp_path)}
    assert {(r["collective"], r["impl"]) for r in recs} == planned
    assert {r["run_id"] for r in recs} == {run_id} and {r["system"] for r in recs} == {"local"}
    assert all(r["nwrong"] == 0 for r in recs)
    status = commbench("jobs", "status", "-o", str(tmp_path), run_id)
    assert status.returncode == 0 and "ready" in status.stdout


def render_interconnect_plan(tmp_path: Path) -> list[RunCommand]:
    profile = load_profile("local")
    runs, _ = plan_runs(
        load_experiment("interconnect"),
        profile,
        registered_implementations(),
        str(tmp_path / "x.jsonl"),
    )
    return runs


# ---------------------------------------------------------------- external baselines

FIXTURE = ROOT / "tests" / "fixtures" / "external" / "osu_allreduce-5.4.1-cray.txt"


def fake_osu(folder: Path) -> Path:
    """An ``osu_allreduce`` that prints a genuine OSU output (rank 0 only, as OSU does)."""
    folder.mkdir()
    exe = folder / "osu_allreduce"
    exe.write_text(
        "#!/bin/bash\n"
        '[ "${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-0}}}" = 0 ] || exit 0\n'
        f"cat {FIXTURE}\n"
    )
    exe.chmod(0o755)
    return folder


def render_with_osu(tmp_path: Path, run_id: str, osu: str) -> Job:
    site = {"osu": osu} if osu else {}
    return render_local(tmp_path, run_id, ("osu",), site, min="64K", max="128K", iters=3, warmup=1)


def check_osu_records(d: Path, run_id: str) -> None:
    assert (d / "ready").is_file(), (d / "error").read_text() if (d / "error").exists() else ""
    recs = records(d)
    osu = [r for r in recs if r["impl"] == "osu:osu_allreduce"]
    assert len(osu) == 19 and {r["run_id"] for r in osu} == {run_id}
    assert {r["nranks"] for r in osu} == {4} and osu[0]["source"] == "osu osu_allreduce v5.4.1"
    assert {r["size_bytes"] for r in recs if r["impl"] == "mpi"} == {65536, 131072}


def test_external_osu_step_runs_and_is_imported_under_bash(tmp_path):
    job = render_with_osu(tmp_path, "bash-osu", str(fake_osu(tmp_path / "osu")))
    proc = run_script(job)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_osu_records(job.run_dir, "bash-osu")
    log = (job.run_dir / "logs" / "02-allreduce-osu-osu_allreduce.log").read_text()
    assert "# OSU MPI Allreduce Latency Test v5.4.1" in log


def test_unconfigured_external_step_is_skipped_with_a_line(tmp_path):
    job = render_with_osu(tmp_path, "bash-no-osu", "")
    proc = run_script(job)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = job.run_dir
    assert (d / "ready").is_file() and not (d / "error").exists()
    assert "skipped 02-allreduce-osu-osu_allreduce: osu not configured" in proc.stdout
    assert "osu not configured" in (d / "skipped.txt").read_text()
    assert {r["impl"] for r in records(d)} == {"mpi"}


def test_external_osu_step_on_local_slurm(tmp_path):
    need_slurm()
    job = render_with_osu(tmp_path, f"osu-{os.getpid()}", str(fake_osu(tmp_path / "osu")))
    path = write_job(job)
    proc = subprocess.run(
        ["sbatch", "--parsable", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    d = job.run_dir
    deadline = time.monotonic() + WAIT_S
    while not ((d / "ready").exists() or (d / "error").exists()):
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id])
            pytest.fail(f"job {job_id} wrote no sentinel in {WAIT_S} s")
        time.sleep(1)
    check_osu_records(d, job.run_id)
