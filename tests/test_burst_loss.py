"""The burst-loss probe: its late shares, its refusals, a 4-rank run."""

from __future__ import annotations

import numpy as np
import pytest

from commbench.benchmarks import burst_loss
from tests.mpirun import run_mpi
from tests.probes import refusal


def test_the_rounds_a_timeout_made_late_are_counted_per_mode() -> None:
    rng = np.random.default_rng(3)
    alone = 88 + rng.normal(0, 1, (8, 40))
    busy = 90 + rng.normal(0, 1, (8, 40))
    busy[2, 5] += 200  # two receiver rounds with the message paid a timeout
    busy[6, 17] += 210
    shares = burst_loss.late_shares(alone, busy)
    assert shares["late_alone"] == 0 and shares["late_busy"] == pytest.approx(2 / 320)
    assert shares["late_by"] == pytest.approx(205, abs=5)
    assert shares["base"] == pytest.approx(88, abs=0.5)
    line = burst_loss.report(1 << 20, shares, 320)
    assert (
        "1M flow" in line and "0.006 with the message part-way (320 receiver rounds each)" in line
    )


def test_none_late_where_no_round_stands_apart() -> None:
    rng = np.random.default_rng(4)
    shares = burst_loss.late_shares(10 + rng.normal(0, 1, 40), 11 + rng.normal(0, 1, 40))
    assert shares["late_alone"] == shares["late_busy"] == shares["late_by"] == 0


def test_timeouts_a_call_sum_every_nodes_counter() -> None:
    before = {0: {"timeouts": 5, "retrans": 9}, 1: {"timeouts": 7, "retrans": 1}}
    after = {0: {"timeouts": 9, "retrans": 90}, 1: {"timeouts": 10, "retrans": 50}}
    assert burst_loss.timeouts_per_call(before, after, 11) == pytest.approx(7 / 11)


@pytest.mark.parametrize("argv, says", [(["--rounds", "1"], "--rounds must be at least 2"),
                                        (["--sizes", "1M,x"], "--sizes '1M,x'"),
                                        (["--spreadout", "1M,,8M"], "--spreadout '1M,,8M'"),
                                        (["--calls", "0"], "--calls at least 1")])  # fmt: skip
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    assert says in refusal(burst_loss.main, argv, capsys)


def test_worker_on_two_nodes_of_two_ranks_of_one_host() -> None:
    argv = ["-m", "commbench.benchmarks.burst_loss", "--worker", "--sizes", "64K",
            "--rounds", "3", "--ranks-per-node", "2"]  # fmt: skip
    proc = run_mpi(4, argv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "64K flow:" in proc.stdout and "(12 receiver rounds each)" in proc.stdout
