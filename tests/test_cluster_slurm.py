"""Multi-node Slurm on the emulated cluster, for real: a 2-node cluster (prefix ``cbj``)
with slurmctld in node 0 and a slurmd in each node, brought up once for this module and
torn down (daemons, then namespaces) even when a test fails.

Needs root, iproute2 and Debian's slurm-wlm + munge: skipped with the reason elsewhere,
a failure under ``CI=true`` (CI runs as root and installs them, see .ci/run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commbench.cluster import netns, slurm
from commbench.cluster.plan import ClusterSpec
from commbench.jobs.joblog import failed_where
from tests.mpirun import ROOT

PREFIX = "cbj"
IN_CI = os.environ.get("CI", "").lower() == "true"
FOLDER = netns.STATE_ROOT / PREFIX  # munged (user munge) must reach its socket dir
WAIT_S = 100


def _require() -> None:
    try:
        netns.preflight()
        slurm.preflight()
    except ValueError as exc:
        if IN_CI:
            pytest.fail(f"CI must run the emulated-cluster Slurm tests: {exc}")
        pytest.skip(str(exc))


def _teardown() -> None:
    slurm.stop(FOLDER)
    if netns.namespaces_with_prefix(PREFIX) or (FOLDER / netns.STATE_FILE).exists():
        netns.remove(PREFIX, FOLDER)


@pytest.fixture(scope="module")
def cluster():
    _require()
    _teardown()  # what a crashed earlier run left
    spec = ClusterSpec(prefix=PREFIX, nodes=2, ranks_per_node=2, nic_mbit=800.0)
    netns.up(spec, FOLDER)
    try:
        slurm.start(FOLDER)
        yield spec
    finally:
        paths = slurm.paths_for(FOLDER)
        down = commbench("cluster", "down", "--prefix", PREFIX)  # stops its Slurm too
        _teardown()
        assert down.returncode == 0 and "stopped: slurmd on cbj-n0" in down.stdout, down
        assert not [d.label for d in slurm.daemons(spec, paths) if slurm.alive(d)]
        assert not netns.namespaces_with_prefix(PREFIX)


def commbench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, COMMBENCH_CLUSTER_PREFIX=PREFIX)
    env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "OMPI_", "PRTE_"))}
    return subprocess.run(
        [sys.executable, "-m", "commbench", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def submit(results: Path, run_id: str, *extra: str, iters: str = "3") -> tuple[str, Path]:
    proc = commbench(
        "jobs", "submit", "--system", "local-cluster", "--nodes", "2", "--run-id", run_id,
        "-o", str(results), "--collective", "allreduce", "--impl", "mpi",
        "-b", "1K", "-e", "4K", "-n", iters, "-w", "1", *extra,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    job_id, printed, run_dir = proc.stdout.split()
    assert printed == run_id and job_id.isdigit()
    return job_id, Path(run_dir)


def wait_sentinel(job_id: str, d: Path) -> str:
    deadline = time.monotonic() + WAIT_S
    while not ((d / "ready").exists() or (d / "error").exists()):
        if time.monotonic() > deadline:
            commbench("cluster", "slurm", "exec", "--prefix", PREFIX, "--", "scancel", job_id)
            out = "".join(p.read_text() for p in d.glob("slurm-*.out"))
            pytest.fail(f"job {job_id} wrote no sentinel in {WAIT_S} s:\n{out[-3000:]}")
        time.sleep(0.5)
    return "ready" if (d / "ready").exists() else "error"


def records(d: Path) -> list[dict]:
    lines = (d / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_two_node_job_runs_across_both_nodes_through_the_nics(cluster, tmp_path):
    before = netns.counters(cluster)
    job_id, d = submit(tmp_path, "two-nodes")
    assert wait_sentinel(job_id, d) == "ready", (d / "error").read_text()
    recs = records(d)
    assert [r["size_bytes"] for r in recs] == [1024, 2048, 4096]
    for r in recs:
        assert r["nranks"] == 4 and r["nwrong"] == 0 and r["system"] == "local-cluster"
        assert r["hostnames"] == ["cbj-n0", "cbj-n1"]
        assert r["emulated_fabric"]["nic_mbit"] == 800.0
    after = netns.counters(cluster)
    for nic in ((0, 0), (0, 1), (1, 0), (1, 1)):  # every rank's own NIC carried its bytes
        assert after[nic]["tx_bytes"] - before[nic]["tx_bytes"] > 4096, nic
    status = commbench("jobs", "status", "-o", str(tmp_path), "two-nodes")
    assert status.returncode == 0, status.stderr
    assert job_id in status.stdout and "ready" in status.stdout


def test_step_failing_on_node_2_names_node_and_step(cluster, tmp_path):
    python = ROOT / "tests" / "scripts" / "python_failing_on_node.sh"
    job_id, d = submit(tmp_path, "fails-on-n1", "--set", f"python={python}")
    assert wait_sentinel(job_id, d) == "error"
    error = (d / "error").read_text()
    assert "01-allreduce-mpi: exit status 7 on node cbj-n1" in error, error
    assert "no usable Python on cbj-n1" in (d / "logs" / "01-allreduce-mpi.log").read_text()


def test_scancel_writes_cancelled_sentinel_and_keeps_completed_records(cluster, tmp_path):
    # Two steps; the second (4 MiB, many iterations) is still running when cancelled.
    job_id, d = submit(tmp_path, "cancelled", "--impl", "mpi,ring", iters="2000")
    deadline = time.monotonic() + WAIT_S
    while not (d / "logs" / "02-allreduce-ring.log").exists():
        assert time.monotonic() < deadline, "the second step never started"
        assert not (d / "error").exists(), (d / "error").read_text()
        time.sleep(0.2)
    done = commbench("cluster", "slurm", "exec", "--prefix", PREFIX, "--", "scancel", job_id)
    assert done.returncode == 0, done.stderr
    assert wait_sentinel(job_id, d) == "error"
    assert "cancelled" in (d / "error").read_text()
    recs = records(d)
    assert {r["impl"] for r in recs} >= {"mpi"}
    assert all(r["nwrong"] == 0 for r in recs)


def test_bad_input_is_one_line_exit_2(cluster, tmp_path):
    proc = commbench("jobs", "submit", "--system", "local-cluster", "--nodes", "3",
                     "--experiment", "interconnect", "-o", str(tmp_path))  # fmt: skip
    assert proc.returncode == 2 and "has 2" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
    env_other = dict(os.environ, COMMBENCH_CLUSTER_PREFIX="cbjx")
    proc = subprocess.run(
        [sys.executable, "-m", "commbench", "jobs", "submit", "--system", "local-cluster",
         "--nodes", "2", "--experiment", "interconnect", "-o", str(tmp_path)],
        cwd=ROOT, env=env_other, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "no emulated cluster is up" in proc.stderr


def test_dead_slurmd_is_named_then_start_recovers(cluster, tmp_path):
    paths = slurm.paths_for(FOLDER)
    victim = paths.slurmd("cbj-n1")
    slurm.stop_daemon(victim)
    proc = commbench("jobs", "submit", "--system", "local-cluster", "--nodes", "2",
                     "--experiment", "interconnect", "-o", str(tmp_path))  # fmt: skip
    assert proc.returncode == 2
    assert "slurmd on cbj-n1 is not running" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    status = commbench("cluster", "slurm", "status", "--prefix", PREFIX)
    assert status.returncode == 1 and "slurmd on cbj-n1: not running" in status.stdout
    # A start that fails (node 1's slurmd port is taken) names the daemon with its log,
    # and stops everything it runs; once the port is free, start brings it all back.
    hold = (
        "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
        "socket.SO_REUSEADDR, 1); s.bind(('', 6818)); s.listen(); print(1, flush=True); "
        "sys.stdin.read()"
    )
    blocker = subprocess.Popen(
        ["ip", "netns", "exec", "cbj-n1", sys.executable, "-c", hold],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert blocker.stdout.readline().strip() == "1"
        broken = commbench("cluster", "slurm", "start", "--prefix", PREFIX, timeout=90)
    finally:
        blocker.kill()
        blocker.wait()
    assert broken.returncode == 2 and len(broken.stderr.strip().splitlines()) == 1
    assert "slurmd on cbj-n1" in broken.stderr and "slurmd.log" in broken.stderr
    assert not [d.label for d in slurm.daemons(cluster, paths) if slurm.alive(d)]
    again = commbench("cluster", "slurm", "start", "--prefix", PREFIX, timeout=90)
    assert again.returncode == 0, again.stderr
    assert all(slurm.alive(d) for d in slurm.daemons(cluster, paths))


# ---------------------------------------------------------------- pure parts (no root)


def test_slurm_conf_names_every_node_by_its_management_address(tmp_path):
    spec = ClusterSpec(prefix="cbq", nodes=3, ranks_per_node=2, nic_mbit=100.0)
    conf = slurm.slurm_conf(spec, slurm.paths_for(tmp_path))
    assert "SlurmctldHost=cbq-n0(10.78.0.1)" in conf
    for i in range(3):
        assert f"NodeName=cbq-n{i} NodeAddr=10.78.0.{i + 1} " in conf
    assert f"AuthInfo=socket={tmp_path}/slurm/munge/munge.socket" in conf
    assert "Nodes=cbq-n0,cbq-n1,cbq-n2 " in conf


@pytest.mark.parametrize(
    ("log", "where"),
    [
        ("x\ncommbench run: rank 3 on cb-n1: error: ValueError: bad\n", "node cb-n1 (rank 3)"),
        ("srun: error: cb-n2: task 5: Exited with exit code 1\n", "node cb-n2 (rank 5)"),
        ("   Process name: [prterun-cb-n0-4089@1,3]\n   Exit code: 7\n", "node cb-n1 (rank 3)"),
        ("   Process name: [prterun-cb-n0-4089@1,9]\n", "rank 9"),
        ("nothing to see\n", ""),
    ],
)
def test_failed_where_reads_the_launchers_words(log, where):
    assert failed_where(log, ["cb-n0", "cb-n1"], 2) == where
