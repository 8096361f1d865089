"""Running commands on the emulated cluster: its launcher and environment, a bounded run,
and the ``commbench simulate`` arguments that model it (used by ``cluster exec``, the
sweep and the cluster benchmark)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from commbench.cluster import netns
from commbench.cluster.plan import ClusterSpec
from commbench.launch import CLUSTER_MPI_ENV


def measure_shm_GBps(nbytes: int = 4 << 20, timeout: float = 120) -> float:
    """Shared-memory rate of this machine: a 2-rank ping-pong of ``nbytes`` (no network)."""
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    cmd = [mpiexec, "-n", "2", "--mca", "btl", "self,sm", sys.executable, "-m",
           "commbench.cluster.pingpong", str(nbytes), "20"]  # fmt: skip
    env = dict(os.environ, **CLUSTER_MPI_ENV)
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise netns.ClusterError(f"measuring shared memory failed: {exc}") from None
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise netns.ClusterError(f"measuring shared memory failed: {why}")
    return float(json.loads(lines[-1])["GBps"])


def launch_env(spec: ClusterSpec, state: dict) -> dict[str, str]:
    env = dict(os.environ)
    env.update(CLUSTER_MPI_ENV)
    env["PRTE_MCA_plm_ssh_agent"] = state["agent"]
    env.setdefault("COMMBENCH_SYSTEM", f"emulated-cluster-{spec.profile or 'custom'}")
    return env


def run_bounded(cmd: list[str], env: dict[str, str], timeout: float) -> int:
    """Run ``cmd`` in its own process group; end the group after ``timeout`` seconds."""
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(
            f"commbench cluster exec: ended after {timeout:g} s: {shlex.join(cmd)}", file=sys.stderr
        )
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return 124
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        raise


# ------------------------------------------------------------------ modelling the cluster


MODELLED_IMPLS = ("fast", "fanout", "spreadout", "balance-only")


def cluster_launcher(prefix: str) -> list[str]:
    """The launcher words that run a per-rank command on the emulated cluster ``prefix``."""
    netns.load_state(netns.state_dir(prefix))  # refuse now if it is not up
    return [sys.executable, "-m", "commbench", "cluster", "exec", "--prefix", prefix, "--"]


def model_overrides(spec: ClusterSpec) -> list[str]:
    """``commbench simulate`` fabric flags for this cluster: TCP payload rate of a NIC,
    the profile's stage cost and, when measured at ``up``, the shared-memory rate as the
    scale-up tier."""
    flags = ["--nic-GBps", f"{spec.payload_GBps:.6g}"]
    if spec.shm_GBps:
        flags += ["--scaleup-GBps", f"{spec.shm_GBps:.6g}"]
    if spec.stage_cost_us:
        flags += ["--stage-us", f"{spec.stage_cost_us:g}"]
    return flags


def cluster_model_argv(prefix: str, workload: str, size: str = "4M") -> list[str]:
    """``commbench simulate`` arguments predicting the all-to-allv sweep on the cluster
    that is up as ``prefix``."""
    return model_argv(netns.load_spec(netns.state_dir(prefix)), workload, size)


def model_argv(
    spec: ClusterSpec, workload: str, size: str = "4M", impls=MODELLED_IMPLS
) -> list[str]:
    """``commbench simulate`` arguments for this cluster: the ``local`` profile's software
    costs with this cluster's nodes, ranks per node, NIC rate and stage cost."""
    return [
        "alltoallv", "--system", "local", "--servers", str(spec.nodes),
        "--gpus-per-node", str(spec.ranks_per_node), "--workload", workload,
        "--size", size, "--impls", ",".join(impls), "--no-tune", *model_overrides(spec),
    ]  # fmt: skip
