"""The registered all-to-allv implementations ``fast``, ``fast+sched``, ``balance-only``
and ``spreadout``, in process (threads on a mailbox transport): results, options, info.
Their MPI runs are in ``test_alltoallv_impls_mpi.py`` and ``test_fast_executor_mpi.py``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench.kernels.baselines.spreadout import spreadout_plan
from commbench.kernels.cases import AlltoallvCase
from commbench.kernels.fast.impls import schedule_options
from commbench.kernels.fast.simulate import alltoallv, random_sendbufs
from commbench.kernels.registry import lookup
from tests.test_fast_executor import traffic_cases
from tests.threaded_transport import run_ranks

IMPLS = ("fast", "fast+sched", "balance-only", "spreadout", "pxn", "deepep")


def make_case(d: np.ndarray, rank: int, seed: int = 1) -> AlltoallvCase:
    send = random_sendbufs(d, seed)[rank]
    return AlltoallvCase(d, send, np.full(int(d[:, rank].sum()), 0xFF, np.uint8), rank)


def run_impl(name: str, d: np.ndarray, g: int, params: dict | None = None, calls: int = 2):
    """Every rank's ``(receive buffer, info)`` after setup and ``calls`` runs."""

    def rank(t):
        impl = lookup("alltoallv", name).factory(t, dict(params or {}))
        case = make_case(d, t.topo.rank)
        impl.setup(case)
        for _ in range(calls):
            case.recv.fill(0xFF)
            impl.run(case)
        return case.recv, impl.info()

    return run_ranks(d.shape[0], g, rank)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic_cases(), st.sampled_from(IMPLS))
def test_implementations_match_alltoallv(tc, name):
    d, g = tc
    want = alltoallv(d, random_sendbufs(d, 1))
    for r, (recv, _) in enumerate(run_impl(name, d, g)):
        np.testing.assert_array_equal(recv, want[r], err_msg=f"{name} rank {r}")


def test_fast_info_reports_synthesis_stages_and_memory():
    d = np.random.default_rng(1).integers(1, 4000, (8, 8))
    _, info = run_impl("fast", d, 2)[0]
    assert info["stages"] >= 1 and info["synthesis_us"] > 0 and info["plan_us"] > 0
    assert info["scheduled_bytes"] >= info["lower_bound_bytes"] > 0
    assert 0 < info["extra_mem_fraction"] < 1
    assert info["extra_mem_max_rank_fraction"] >= info["extra_mem_fraction"]
    assert 0 < info["scratch_bytes"] <= info["extra_bytes_max_rank"]  # rank 0's own scratch
    assert info["steps"] >= 3 and info["groups"] == "world"
    _, only = run_impl("balance-only", d, 2)[0]
    assert only["stages"] == 0 and only["tail_bytes"] > 0 and only["steps"] == 3
    _, sched = run_impl("fast+sched", d, 2, calls=3)[0]
    assert sched["calls"] == 3 and sched["per_call_schedule_us"] > 0
    _, spread = run_impl("spreadout", d, 2)[0]
    assert spread == {"steps": 7}


def test_fast_schedules_once_per_matrix_and_sched_every_call():
    rng = np.random.default_rng(2)
    mats = [rng.integers(0, 3000, (8, 8)) for _ in range(3)]

    def rank(t):
        r = t.topo.rank
        fast = lookup("alltoallv", "fast").factory(t, {})
        seen = []
        for d in (mats[0], mats[0], mats[1]):
            fast.setup(make_case(d, r))
            seen.append(fast.schedule)
        per_call = lookup("alltoallv", "fast+sched").factory(t, {})
        per_call.setup(make_case(mats[0], r))
        outs = []
        for i, d in enumerate(mats * 4):  # a new matrix on every call, no setup between
            case = make_case(d, r, seed=i)
            per_call.run(case)
            outs.append(np.array_equal(case.recv, alltoallv(d, random_sendbufs(d, i))[r]))
        return seen[0] is seen[1], seen[1] is not seen[2], all(outs), per_call.info()["calls"]

    for same, renewed, exact, calls in run_ranks(8, 4, rank):
        assert same and renewed and exact and calls == 12


def test_options_reach_the_scheduler():
    d = np.random.default_rng(3).integers(1, 4000, (8, 8))
    _, info = run_impl("fast", d, 1, {"max_stages": 1, "strategy": "bvn", "groups": "split"})[0]
    assert info["stages"] == 1 and info["tail_bytes"] > 0 and info["strategy"] == "bvn"
    assert info["groups"] == "split"
    _, exact = run_impl("fast", d, 1, {"max_stages": "none"})[0]
    assert exact["tail_bytes"] == 0 and exact["stages"] > 1
    _, cut = run_impl("fast", d, 4, {"max_stage_bytes": 256, "balance": "prologue"})[0]
    assert cut["stages"] > 1 and cut["balance"] == "prologue"


def test_schedule_options_parsing():
    assert schedule_options(
        "fast", {"max_stages": "none", "quantum": 64}, ("max_stages", "quantum")
    ) == (
        {"max_stages": None, "quantum": 64},
        "world",
        None,
    )
    assert schedule_options("x", {"groups": "split", "sync": "none"}, ()) == ({}, "split", "none")
    with pytest.raises(
        ValueError, match="balance-only: unknown --param 'strategy' \\(known: groups, sync\\)"
    ):
        schedule_options("balance-only", {"strategy": "bvn"}, ())


@pytest.mark.parametrize(
    "name,params,message",
    [
        ("fast", {"strategy": "greedy"}, "unknown strategy"),
        ("fast", {"max_stages": -1}, "max_stages"),
        ("fast", {"stages": 3}, "unknown --param 'stages'"),
        ("fast+sched", {"tail_penalty": 0.5}, "tail_penalty"),
        ("fast", {"groups": "all"}, "groups must be one of"),
        ("balance-only", {"max_stages": 2}, "unknown --param 'max_stages'"),
        ("spreadout", {"x": 1}, "spreadout takes no --param"),
    ],
)
def test_bad_options_are_refused_at_construction(name, params, message):
    def rank(t):
        with pytest.raises(ValueError, match=message):
            lookup("alltoallv", name).factory(t, params)

    run_ranks(2, 1, rank)


def test_a_matrix_the_scheduler_rejects_fails_on_every_rank():
    d = np.ones((4, 4), dtype=np.int64)
    d[1, 2] = -5

    def rank(t):
        impl = lookup("alltoallv", "fast").factory(t, {})
        case = AlltoallvCase(d, np.zeros(0, np.uint8), np.zeros(0, np.uint8), t.topo.rank)
        with pytest.raises(
            ValueError, match="fast: rank 0 refuses the plan: traffic\\[1\\]\\[2\\] is negative"
        ):
            impl.setup(case)
        return t.posted

    assert run_ranks(4, 2, rank) == [0, 0, 0, 0]


# ---------------------------------------------------------------- spread-out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(0, 2**32 - 1))
def test_spreadout_steps_are_shifted_round_robin(p, seed):
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 100, (p, p)) * (rng.random((p, p)) < 0.7)
    seen_send, seen_recv = set(), set()
    for r in range(p):
        own, steps = spreadout_plan(d, r)
        assert own[2] == d[r, r]
        assert [k for k, _, _ in steps] == sorted({k for k, _, _ in steps})
        for k, send, recv in steps:
            assert 1 <= k < p and (send or recv)
            if send:
                assert send[0] == (r + k) % p and send[2] == d[r, send[0]] > 0
                seen_send.add((r, send[0]))
            if recv:
                assert recv[0] == (r - k) % p and recv[2] == d[recv[0], r] > 0
                seen_recv.add((recv[0], r))
    pairs = {(u, v) for u in range(p) for v in range(p) if u != v and d[u, v]}
    assert seen_send == seen_recv == pairs


def test_fast_sched_ahead_makes_the_next_schedule_during_the_call():
    """``ahead=1``: a call uses the schedule the previous call made for its matrix, and
    schedules itself when the matrix changed; the bytes are MPI_Alltoallv's either way."""
    rng = np.random.default_rng(9)
    mats = [rng.integers(0, 3000, (8, 8)) for _ in range(2)]
    order = [0, 0, 0, 1, 1, 0]  # 3 calls reuse the previous call's matrix

    def rank(t):
        r = t.topo.rank
        impl = lookup("alltoallv", "fast+sched").factory(t, {"ahead": "1", "tail": "early"})
        impl.setup(make_case(mats[0], r))
        exact = []
        for i, k in enumerate(order):
            case = make_case(mats[k], r, seed=i)
            impl.run(case)
            exact.append(
                np.array_equal(case.recv, alltoallv(mats[k], random_sendbufs(mats[k], i))[r])
            )
        return all(exact), impl.info()

    for exact, info in run_ranks(8, 4, rank):
        assert exact and info["ahead"] and info["ahead_used"] == 3 and info["calls"] == 6
    with pytest.raises(ValueError, match="ahead must be 0 or 1"):
        run_ranks(1, 1, lambda t: lookup("alltoallv", "fast+sched").factory(t, {"ahead": "yes"}))
    with pytest.raises(ValueError, match=r"known: .*ahead, groups"):
        run_ranks(1, 1, lambda t: lookup("alltoallv", "fast+sched").factory(t, {"ahed": "1"}))
