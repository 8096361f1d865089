"""The exchange-order benchmark: its pair analysis, its report, its refusals, a 2-rank run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.benchmarks.exchange_order import cluster_spec, main, pair_finishes, summary
from tests.mpirun import run_mpi


def test_pair_finishes_names_the_early_and_late_poster() -> None:
    # 4 ranks, 1 call, distance 1: pairs (0, 1) posted 20 ms apart, (2, 3) together
    posts = np.array([[0.0], [20.0], [5.0], [5.5]])
    dones = np.array([[200.0], [110.0], [95.0], [96.0]])
    rows = pair_finishes(posts, dones, 1, gap_ms=5)
    assert rows.tolist() == [[20.0, 180.0, 90.0]]


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 3).map(lambda k: 1 << k),
    st.integers(1, 4),
    st.floats(0, 50),
    st.data(),
)
def test_pair_finishes_counts_each_pair_once(ranks: int, calls: int, gap: float, data) -> None:
    times = st.floats(0, 100, allow_nan=False)
    posts = np.array(data.draw(st.lists(times, min_size=ranks * calls, max_size=ranks * calls)))
    posts = posts.reshape(ranks, calls)
    dones = posts + 50
    for distance in (1 << k for k in range(ranks.bit_length() - 1)):
        rows = pair_finishes(posts, dones, distance, gap)
        apart = sum(
            abs(posts[a, c] - posts[a ^ distance, c]) >= gap
            for a in range(ranks)
            if a < a ^ distance
            for c in range(calls)
        )
        assert len(rows) == apart
        assert (rows[:, 0] >= gap).all()
        # each partner done 50 ms after its own post: the late one 50 after the later post
        assert np.allclose(rows[:, 2], 50)
        assert np.allclose(rows[:, 1], 50 - rows[:, 0])


def test_summary_reports_call_steps_and_pairs_apart() -> None:
    posts = np.zeros((2, 3, 1))
    posts[1, :, 0] = 10  # rank 1 posts 10 ms late in every call
    dones = np.full((2, 3, 1), 100.0)
    text = summary("receives-first", posts, dones, 5)
    assert text.splitlines()[0] == "receives-first: call 100.0 ms (median of 3; 100 100 100)"
    assert "3/3 pairs posted >= 5 ms apart, done 90 (early) and 90 (late)" in text


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--nodes", "6"], "--nodes 6: give a power of two"),
        (["--nic", "fast"], "bad NIC rate 'fast'"),
        (["--calls", "0"], "--calls and --rounds must be at least 1"),
    ],
)
def test_bad_input_is_one_line(argv, says, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_cluster_spec_is_one_rank_per_node() -> None:
    spec = cluster_spec(4, "100mbit")
    assert (spec.nodes, spec.ranks_per_node, spec.nic_mbit) == (4, 1, 100)


def test_worker_runs_both_orders_on_two_ranks() -> None:
    proc = run_mpi(
        2,
        [
            "-m",
            "commbench.benchmarks.exchange_order",
            "--worker",
            "--size",
            "64K",
            "--calls",
            "2",
            "--rounds",
            "1",
        ],  # fmt: skip
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# 2 ranks, 64K each way a step, 2 calls an order")
    assert [ln.split(":")[0] for ln in lines if not ln.startswith((" ", "#"))] == [
        "receives-first",
        "sends-first",
    ]
    assert sum(ln.startswith("  step 0: wait") for ln in lines) == 2


def test_worker_refuses_a_rank_count_not_a_power_of_two() -> None:
    proc = run_mpi(3, ["-m", "commbench.benchmarks.exchange_order", "--worker"], timeout=120)
    assert proc.returncode != 0
    assert "run it on a power of two" in proc.stderr
