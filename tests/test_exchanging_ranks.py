"""The exchanging-ranks probe: its sets and partners, the law it checks, its refusals, a
4-rank run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commbench.benchmarks import exchanging_ranks as probe
from tests.mpirun import run_mpi
from tests.probes import refusal


@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 20))
def test_every_partner_is_on_another_node_and_partners_pair_up(log_nodes, g, step):
    nodes = 1 << log_nodes
    for which in probe.SETS:
        ranks = probe.members(which, nodes, g)
        for r in ranks:
            q = probe.partner(which, r, step, nodes, g)
            assert q in ranks and q // g != r // g
            assert probe.partner(which, q, step, nodes, g) == r


def test_the_sets_and_the_law():
    assert probe.members("leaders", 4, 2) == [0, 2, 4, 6]
    assert probe.members("pair", 4, 2) == [0, 2]
    # the emulated 4x2: all 8 exchanging 57 us a step, one pair 22: the 4 leaders 28.5
    assert probe.law_us(57.0, 22.0, 4, 8) == pytest.approx(28.5)
    assert probe.law_us(57.0, 40.0, 4, 8) == pytest.approx(40.0)  # never below a pair


@pytest.mark.parametrize("argv, says", [(["--nodes", "6"], "--nodes 6: give a power of two"),
                                        (["--steps", "0"], "must be at least 1")])  # fmt: skip
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    assert says in refusal(probe.main, argv, capsys)


def test_worker_on_four_ranks_of_one_host() -> None:
    argv = ["-m", "commbench.benchmarks.exchanging_ranks", "--worker", "--ranks-per-node", "2",
            "--steps", "4", "--reps", "3", "--rounds", "2"]  # fmt: skip
    proc = run_mpi(4, argv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# 2 nodes x 2 ranks, 8 B each way, 4 steps x 3 reps a set")
    assert len(lines) == 3 and all(ln.startswith("all ") and "law's leaders" in ln
                                   for ln in lines[1:])  # fmt: skip
    proc = run_mpi(3, argv, timeout=120)
    assert proc.returncode == 2 and "run it on 2, 4, 8 ... nodes" in proc.stderr
