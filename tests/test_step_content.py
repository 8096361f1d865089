"""The step-content probe: its steps, what it derives from the variants, its refusals, a
4-rank run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commbench.benchmarks import step_content as probe
from tests.mpirun import run_mpi
from tests.probes import refusal


@given(st.integers(1, 5))
def test_each_rank_s_send_is_its_partner_s_receive(log_size):
    size = 1 << log_size
    for pattern in probe.PATTERNS:
        plans = [probe.steps(pattern, r, size) for r in range(size)]
        assert len({len(p) for p in plans}) == 1
        for r, plan in enumerate(plans):
            for k, (dst, _, reduces) in enumerate(plan):
                assert plans[dst][k][1] == r  # dst receives from r at step k
                assert reduces == (pattern == "recursive-doubling" or k < size - 1)


def test_the_message_and_the_reduction_per_step():
    # 14 steps, 7 reducing: 560 -> 700 us with a message, 798 with reductions
    message, reduction = probe.added_us({"empty": 560.0, "message": 700.0, "reduce": 798.0}, 14, 7)
    assert (message, reduction) == pytest.approx((10.0, 14.0))


@pytest.mark.parametrize("argv, says", [(["--size", "3"], "give a multiple of bfloat16's 2"),
                                        (["--dtype", "complex"], "--dtype: unknown dtype"),
                                        (["--nodes", "3"], "a power of two ranks")])  # fmt: skip
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    assert says in refusal(probe.main, argv, capsys)


def test_worker_on_four_ranks_of_one_host() -> None:
    argv = ["-m", "commbench.benchmarks.step_content", "--worker", "--calls", "3"]
    proc = run_mpi(4, argv, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# 4 ranks, 32 B bfloat16 a message, 3 calls a variant")
    assert lines[1].startswith("ring (6 steps): empty ") and "a reduction" in lines[1]
    assert lines[2].startswith("recursive-doubling (2 steps): empty ")
    proc = run_mpi(3, argv, timeout=120)
    assert proc.returncode == 2 and "run it on a power of two" in proc.stderr
