"""The barrier-skew probe: its per-call quantities, its refusals, a 4-rank run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.benchmarks import barrier_skew
from tests.mpirun import run_mpi
from tests.probes import refusal


def test_the_skew_is_in_the_harness_s_time_not_in_the_call_from_the_last_exit() -> None:
    # 2 ranks, 1 call: rank 0 out at 0 s, rank 1 at 300 us; both done at 800 us
    exits, ends = np.array([[0.0], [300e-6]]), np.array([[800e-6], [800e-6]])
    stats = barrier_skew.summary(exits, ends)
    assert np.allclose([stats["skew"][0], stats["harness"][0], stats["from_last"][0]],
                       [300.0, 800.0, 500.0])  # fmt: skip
    assert barrier_skew.report(stats).startswith("exit skew 300 us (300-300); call by the ")


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 8), st.integers(1, 5), st.data())
def test_the_harness_s_call_is_the_last_exit_s_plus_at_most_the_skew(ranks, calls, data):
    draw = st.lists(st.floats(0, 1e-3), min_size=ranks * calls, max_size=ranks * calls)
    exits = np.array(data.draw(draw)).reshape(ranks, calls)
    ends = exits.max(axis=0) + np.array(data.draw(draw)).reshape(ranks, calls)
    s = barrier_skew.summary(exits, ends)
    assert (s["from_last"] <= s["harness"] + 1e-6).all()
    assert (s["harness"] <= s["from_last"] + s["skew"] + 1e-6).all()


@pytest.mark.parametrize("argv, says", [(["--nodes", "6"], "--nodes 6: give a power of two"),
                                        (["--calls", "0"], "must be at least 1")])  # fmt: skip
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    assert says in refusal(barrier_skew.main, argv, capsys)


def test_worker_on_four_ranks_of_one_host() -> None:
    argv = ["-m", "commbench.benchmarks.barrier_skew", "--worker", "--calls", "5", "--rounds", "2"]
    proc = run_mpi(4, argv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "# 4 ranks, 256 each way a step, 5 calls a round"
    assert len(lines) == 3 and all(ln.startswith("exit skew ") for ln in lines[1:])
    proc = run_mpi(3, argv, timeout=120)
    assert proc.returncode == 2 and "run it on a power of two" in proc.stderr
