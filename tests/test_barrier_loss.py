"""The barrier-loss probe: its late counts, its refusals, a 4-rank run."""

from __future__ import annotations

import numpy as np
import pytest

from commbench.benchmarks import barrier_loss
from tests.mpirun import run_mpi
from tests.probes import refusal


def test_the_samples_and_rounds_a_timeout_made_late_are_counted() -> None:
    rng = np.random.default_rng(5)
    every = 99 + rng.normal(0, 1, (8, 30))
    every[1, 4] += 180  # three samples in two rounds paid a timeout
    every[5, 4] += 175
    every[2, 20] += 190
    late, rounds, by_rank = barrier_loss.late_counts(every)
    assert late == pytest.approx(3 / 240) and rounds == pytest.approx(2 / 30)
    assert by_rank.tolist() == pytest.approx([0, 1 / 30, 1 / 30, 0, 0, 1 / 30, 0, 0])
    none = barrier_loss.late_counts(99 + rng.normal(0, 1, (8, 30)))
    assert none[:2] == (0.0, 0.0) and not none[2].any()
    line = barrier_loss.report("fanout", "spin", 1, every, 1 << 20)
    assert "fanout after a spin  barrier, trial 1: 1M a rank" in line
    assert (
        "0.013 of 240 samples (by rank 0.00 0.03 0.03 0.00 0.00 0.03 0.00 0.00), 0.07 of rounds"
        in line
    )


def test_an_incast_round_is_read_at_its_receiver() -> None:
    every = np.full((4, 8), 50.0)  # round i's receiver is rank i mod 4
    every[np.arange(8) % 4, np.arange(8)] = 99.0
    every[2, 6] += 200  # its receiver paid a timeout
    every[1, 6] += 400  # a sender's own time is not the port's
    assert barrier_loss.receivers(every).tolist() == [[99.0] * 6 + [299.0, 99.0]]
    line = barrier_loss.report("incast", "spin", 0, every, 1 << 20)
    assert "late by a timeout: 0.125 of 8 samples" in line


def test_a_hot_round_reads_its_hot_rank_beside_the_others() -> None:
    every = np.full((4, 8), 99.0)
    every[2, 6] += 200  # round 6's hot rank (6 mod 4) paid a timeout
    every[0, 6] += 190  # and one of the others
    line = barrier_loss.report("hot", "quiet", 0, every, 1 << 20)
    assert "the hot rank 0.125 of 8 rounds, the others 0.042" in line


@pytest.mark.parametrize("argv, says", [(["--rounds", "1"], "--rounds must be at least 2"),
                                        (["--bytes", "1Q"], "--bytes '1Q'"),
                                        (["--nodes", "1"], "--nodes must be at least 2"),
                                        (["--patterns", "fanout,ring"], "each one of flows"),
                                        (["--hot", "0.5"], "--hot 0.5: must be at least 1"),
                                        (["--senders", "7"], "--senders 7: 0 (all) to the")])  # fmt: skip
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    assert says in refusal(barrier_loss.main, argv, capsys)


def test_worker_on_two_nodes_of_two_ranks_of_one_host() -> None:
    argv = ["-m", "commbench.benchmarks.barrier_loss", "--worker", "--bytes", "64K",
            "--rounds", "3", "--trials", "1", "--ranks-per-node", "2"]  # fmt: skip
    proc = run_mpi(4, argv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for pattern in barrier_loss.PATTERNS:
        for barrier in barrier_loss.BARRIERS:
            assert f"{pattern:6s} after a {barrier:5s} barrier, trial 0: 64K a rank" in proc.stdout
    assert "of 12 samples" in proc.stdout
