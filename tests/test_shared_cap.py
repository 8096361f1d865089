"""The shared-cap probe: its model line, its refusals and a 4-rank run."""

from __future__ import annotations

import numpy as np
import pytest

from commbench.benchmarks.shared_cap import main, model_line, nic_counts
from tests.mpirun import run_mpi


def test_nic_counts() -> None:
    assert nic_counts(8) == [1, 2, 4, 8]
    assert nic_counts(4) == [1, 2, 4]
    assert nic_counts(2) == [1, 2]


def test_model_line_reads_the_runs_rate_and_cap() -> None:
    """Rate 1 MiB in 87 ms, cap 8 MiB in 100 ms: two half NICs end first at the cap's
    eighth, the six others at their own rate after; the old bound is the step's bytes."""
    m = 1 << 20
    sizes = np.array([m] * 6 + [m // 2] * 2, dtype=np.float64)
    line = model_line(m, 87.0, 100.0, sizes)
    small = (m / 2) / (8 * m / 100.0 / 8)
    big = small + (m / 2) / (m / 87.0)
    assert f"small {small:.1f}, big {big:.1f} ms" in line
    assert f"{7 * m / (8 * m / 100.0):.1f} ms for all" in line
    # no cap below the NICs' sum: everyone at their own rate
    free = model_line(m, 87.0, 87.0, sizes)
    assert "small 43.5, big 87.0 ms" in free and "87.0 ms for all" in free


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--size", "x"], "x"),
        (["--size", "1"], "--size must be at least 2 bytes"),
        (["--repeats", "0"], "--repeats and --ranks-per-node at least 1"),
        (["--nic", "fast"], "bad NIC rate 'fast'"),
    ],
)
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_worker_on_four_ranks() -> None:
    argv = ["-m", "commbench.benchmarks.shared_cap", "--worker", "--size", "64K", "--repeats", "2"]
    proc = run_mpi(4, argv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# 2 nodes x 2, rail ring, 64K a NIC")
    assert [ln.split(":")[0] for ln in lines[1:4]] == ["k = 1", "k = 2", "k = 4"]
    assert lines[4].startswith("unequal (3 x 64K, 1 x 32K): small ")
    assert lines[5].startswith("model from this run's rate and cap: small ")


def test_worker_refuses_a_single_node() -> None:
    argv = ["-m", "commbench.benchmarks.shared_cap", "--worker", "--ranks-per-node", "4"]
    proc = run_mpi(4, argv, timeout=120)
    assert proc.returncode != 0
    assert "run it on 2 or more nodes" in proc.stderr


def test_a_cluster_that_cannot_be_built_is_one_line(monkeypatch, capsys) -> None:
    from commbench.cluster import netns

    def refuse(spec, folder):
        raise netns.ClusterError("the emulated cluster needs root: run it as root")

    monkeypatch.setattr(netns, "namespaces_with_prefix", lambda prefix: [])
    monkeypatch.setattr(netns, "up", refuse)
    assert main(["--size", "64K"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "python -m commbench.benchmarks.shared_cap: the emulated cluster needs root: run it as root"
    ]
