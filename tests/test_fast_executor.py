"""The FAST per-rank executor, in process: every rank a thread on a mailbox transport
(``tests/threaded_transport.py``), checked byte for byte against MPI_Alltoallv's layout;
the plan checks and the cross-rank agreement. The MPI runs are in
``test_fast_executor_mpi.py``."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commbench.gpucheck.checks import self_plan
from commbench.kernels.cases import AlltoallvCase
from commbench.kernels.fast import Scheduler, schedule
from commbench.kernels.fast import plan as P
from commbench.kernels.fast.executor import (
    PlanExecutor,
    _bind_order,
    agree,
    fingerprint,
    load,
    plan_problem,
    schedule_problem,
)
from commbench.kernels.fast.simulate import alltoallv, random_sendbufs
from commbench.kernels.transport import slices
from tests.threaded_transport import run_ranks


@st.composite
def traffic_cases(draw):
    """A traffic matrix (zeros, odd sizes, the occasional huge pair) and its node size."""
    servers = draw(st.integers(1, 4))
    g = draw(st.integers(1, 4))
    p = servers * g
    kind = draw(st.sampled_from(["dense", "sparse", "hot", "zero"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "zero":
        d = np.zeros((p, p), dtype=np.int64)
    elif kind == "hot":
        d = np.zeros((p, p), dtype=np.int64)
        d[rng.integers(p), rng.integers(p)] = int(rng.integers(1, 50_000))
    else:
        d = rng.integers(0, 3000, (p, p)) * rng.choice([1, 3, 7, 13], (p, p))
        if kind == "sparse":
            d[rng.random((p, p)) < 0.6] = 0
    return d.astype(np.int64), g


OPTIONS = st.sampled_from([
    {},
    {"strategy": "bvn", "max_stages": None},
    {"strategy": "threshold", "quantum": "auto"},
    {"max_stages": 0},
    {"max_stages": 1},
    {"balance": "prologue"},
    {"max_stage_bytes": 512},
])  # fmt: skip


def execute(sched, groups: str = "world", sendbufs=None, once: bool = False) -> list[np.ndarray]:
    """Every rank's receive buffer after running its plan on the threaded transport
    (``once``: the buffer slices are cut and freed step by step during the run)."""
    d = sched.traffic
    send = random_sendbufs(d, seed=1) if sendbufs is None else sendbufs

    def rank(t):
        r = t.topo.rank
        recv = np.full(int(d[:, r].sum()), 0xFF, np.uint8)
        ex = PlanExecutor(t, groups)
        ex.bind(sched.plan(r), send[r], recv, once=once)
        ex.run()
        return recv

    return run_ranks(sched.nranks, sched.gpus_per_node, rank)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic_cases(), OPTIONS, st.sampled_from(["world", "split"]), st.booleans())
def test_executor_matches_alltoallv(tc, options, groups, once):
    d, g = tc
    sched = schedule(d, g, **options)
    for r in range(sched.nranks):
        assert schedule_problem(sched, d, g, r, int(d[r].sum()), int(d[:, r].sum())) is None
    send = random_sendbufs(d, seed=1)
    got = execute(sched, groups, send, once)
    want = alltoallv(d, send)
    for r in range(len(got)):
        np.testing.assert_array_equal(got[r], want[r], err_msg=f"rank {r}")


def test_one_group_per_step_and_scratch_only_grows():
    rng = np.random.default_rng(3)
    big = rng.integers(0, 5000, (8, 8))
    small = rng.integers(0, 50, (8, 8))

    def rank(t):
        r = t.topo.rank
        ex = PlanExecutor(t)
        out = []
        for d in (big, small, big):
            sched = schedule(d, 2)
            send = random_sendbufs(d, seed=2)[r]
            recv = np.zeros(int(d[:, r].sum()), np.uint8)
            before = t.posted
            ex.bind(sched.plan(r), send, recv)
            assert all(len(posts) <= 1 for posts, _ in ex._steps)  # one group per step
            ex.run()
            out.append((recv, ex.scratch_bytes, t.posted - before))
        return out

    results = run_ranks(8, 2, rank)
    for r, per_call in enumerate(results):
        for (recv, _, _), d in zip(per_call, (big, small, big), strict=True):
            np.testing.assert_array_equal(recv, alltoallv(d, random_sendbufs(d, seed=2))[r])
        sizes = [s for _, s, _ in per_call]
        assert sizes[0] == sizes[1] == sizes[2]  # allocated once for the largest matrix
        assert sizes[0] >= schedule(big, 2).plan(r).extra_bytes


class _Recording:
    """A transport that records what each ``start`` posts (group, peers and sizes)."""

    def __init__(self, transport) -> None:
        self.transport, self.topo, self.posts = transport, transport.topo, []

    def empty(self, n: int, dtype):
        return self.transport.empty(n, dtype)

    def start(self, sends, recvs, group: str = "world"):
        self.posts.append((group, [(p, v.size) for p, v in sends], [(p, v.size) for p, v in recvs]))
        return self.transport.start(sends, recvs, group)

    def copy(self, dst, src) -> None:
        self.transport.copy(dst, src)


def test_bind_once_cuts_and_frees_steps_during_the_run():
    """``bind(once=True)`` cuts no slice up front and keeps none but the last step's
    after a run; its runs post exactly what an eager bind's do, and a second run (cut
    again) moves the same bytes."""
    d = np.random.default_rng(8).integers(0, 3000, (8, 8))
    sched = schedule(d, 2)
    send = random_sendbufs(d, seed=3)

    def rank(t):
        r = t.topo.rank
        eager_t, once_t = _Recording(t), _Recording(t)
        eager, once = PlanExecutor(eager_t), PlanExecutor(once_t)
        recv = [np.zeros(int(d[:, r].sum()), np.uint8) for _ in range(3)]
        eager.bind(sched.plan(r), send[r], recv[0])
        once.bind(sched.plan(r), send[r], recv[1], once=True)
        cut_before = len(once._steps)
        for ex in (eager, once):  # every rank runs both, in the same order
            ex.run()
        kept = len(once._steps)
        once.bind(sched.plan(r), send[r], recv[2], once=True)
        once.run()
        half = len(once_t.posts) // 2
        same = eager_t.posts == once_t.posts[:half] == once_t.posts[half:]
        return recv, cut_before, kept, same, once.nsteps

    want = alltoallv(d, send)
    for r, (recv, cut_before, kept, same, nsteps) in enumerate(run_ranks(8, 2, rank)):
        for got in recv:
            np.testing.assert_array_equal(got, want[r])
        assert cut_before == 0 and kept == 0 and same and nsteps > 0


class _Ranges(_Recording):
    """:class:`_Recording` with ``start_ranges``: what it posts recorded the same way."""

    def __init__(self, transport) -> None:
        super().__init__(transport)
        self.ranged = 0

    def start_ranges(self, bufs, sends, recvs, group: str = "world"):
        self.ranged += 1
        return self.start(slices(bufs, sends), slices(bufs, recvs), group)


@pytest.mark.parametrize("groups", ["world", "split"])
def test_fused_order_and_offset_posts_match_an_eager_bind(groups):
    """``fast+sched``'s path: the scheduler puts the plan in the executor's posting order
    in its own call (the bind takes it as is), and a run posts from buffer offsets
    (``start_ranges``): the same messages, in the same order, as a plan bound eagerly."""
    d = np.random.default_rng(11).integers(0, 2500, (8, 8))
    send = random_sendbufs(d, seed=5)

    def rank(t):
        r = t.topo.rank
        eager_t, once_t = _Recording(t), _Ranges(t)
        eager, once = PlanExecutor(eager_t, groups), PlanExecutor(once_t, groups)
        plan = Scheduler(4)(d, r, once.posting).plan(r)
        own = _bind_order()(np.ascontiguousarray(plan.ops).view(np.int64).reshape(-1, 9),
                            plan.nsteps, groups == "world", t.topo.node * 4, 4, t.topo.local)  # fmt: skip
        fused = plan.order is not None and plan.order[0] == once.posting
        same_order = all(np.array_equal(a, b) for a, b in zip(plan.order[1:], own, strict=True))
        recv = [np.zeros(int(d[:, r].sum()), np.uint8) for _ in range(2)]
        eager.bind(schedule(d, 4).plan(r), send[r], recv[0])
        once.bind(plan, send[r], recv[1], once=True)
        eager.run()
        once.run()
        return recv, fused and same_order, eager_t.posts == once_t.posts, once_t.ranged

    want = alltoallv(d, send)
    for r, (recv, fused, same, ranged) in enumerate(run_ranks(8, 4, rank)):
        for got in recv:
            np.testing.assert_array_equal(got, want[r])
        assert fused and same and ranged > 0


def test_split_groups_post_node_and_rail_separately():
    d = np.random.default_rng(4).integers(1, 900, (8, 8))
    sched = schedule(d, 4)

    def rank(t):
        ex = PlanExecutor(t, "split")
        ex.bind(sched.plan(t.topo.rank), np.zeros(int(d[t.topo.rank].sum()), np.uint8),
                np.zeros(int(d[:, t.topo.rank].sum()), np.uint8))  # fmt: skip
        return {start.__self__.group for starts, _ in ex._steps for start in starts}

    assert set().union(*run_ranks(8, 4, rank)) == {"node", "rail"}


def test_unknown_grouping_is_refused():
    with pytest.raises(ValueError, match="groups must be one of world, split"):
        PlanExecutor(None, "both")


@pytest.mark.parametrize("once", [False, True])
def test_stages_run_as_rounds_of_the_rail_on_cpu(once):
    """``sync="rail"`` (cpu's default): one rail barrier before every rail step after the
    first, as many on every rank whichever of its steps are empty (a skewed matrix leaves
    some empty); ``sync="none"`` holds none. Both move the bytes of an all-to-allv."""
    d = np.random.default_rng(12).integers(0, 3000, (8, 8))
    d[0, 4:] = 0  # rank 0 sends nothing off its server: empty rail steps on some ranks
    sched = schedule(d, 2)
    send = random_sendbufs(d, seed=6)

    def rank(t):
        r = t.topo.rank
        out = []
        for sync in ("rail", "none"):
            ex = PlanExecutor(t, sync=None if sync == "rail" else sync)
            recv = np.zeros(int(d[:, r].sum()), np.uint8)
            ex.bind(sched.plan(r), send[r], recv, once=once)
            before = t.barriers.get("rail", 0)
            ex.run()
            out.append((ex.sync, recv, t.barriers.get("rail", 0) - before, ex.nsteps))
        return out

    want = alltoallv(d, send)
    nsteps = sched.plan(0).nsteps
    results = run_ranks(8, 2, rank)
    assert len({bound for out in results for *_, bound in out}) > 1  # some steps are empty
    for r, out in enumerate(results):
        (sync, got, meets, _), (none, got_none, meets_none, _) = out
        np.testing.assert_array_equal(got, want[r])
        np.testing.assert_array_equal(got_none, want[r])
        assert (sync, meets, none, meets_none) == ("rail", nsteps - 3, "none", 0)


def test_rail_sync_is_cpu_only_and_checked():
    topo = SimpleNamespace(node=0, gpus_per_node=2, local=0)
    gpu = SimpleNamespace(name="cuda", topo=topo)
    assert PlanExecutor(gpu).sync == "none"
    with pytest.raises(ValueError, match="sync=rail is for the cpu backend"):
        PlanExecutor(gpu, sync="rail")
    with pytest.raises(ValueError, match="sync must be one of rail, none"):
        PlanExecutor(SimpleNamespace(name="cpu", topo=topo), sync="node")


# ---------------------------------------------------------------- plan checks


def _plan_and_sizes(g: int = 2, rank: int = 1):
    d = np.random.default_rng(5).integers(1, 700, (8, 8))
    sched = schedule(d, g)
    return sched.plan(rank), int(d[rank].sum()), int(d[:, rank].sum())


def _corrupt(plan: P.RankPlan, mask_fn, field: str, value) -> P.RankPlan:
    ops = plan.ops.copy()
    i = int(np.flatnonzero(mask_fn(ops))[0])
    ops[field][i] = value(ops[i]) if callable(value) else value
    return P.RankPlan(plan.rank, ops, plan.nsteps, plan.buffer_bytes)


def _is(kind, group=None):
    return lambda o: (o["kind"] == kind) & (True if group is None else o["group"] == group)


CORRUPTIONS = [
    ("nbytes", _is(P.SEND), 0, "moves 0 bytes"),
    ("peer", _is(P.SEND, P.NODE), 2, "node peer outside 0..1"),
    ("peer", _is(P.RECV, P.RAIL), 4, "rail peer outside 0..3"),
    ("group", _is(P.SEND), P.LOCAL, "outside the node and rail groups"),
    ("kind", _is(P.COPY), 7, "unknown op kind"),
    ("step", _is(P.SEND), 99, "steps are not sorted"),
    ("dst_off", _is(P.RECV), lambda o: o["dst_off"] + 10**9, "outside the"),
    ("src_buf", _is(P.SEND), P.RECV_BUF, "src buffer is not one it may use"),
    ("dst_buf", _is(P.RECV), P.SEND_BUF, "dst buffer is not one it may use"),
    ("src_off", lambda o: (o["kind"] != P.RECV) & (o["src_buf"] == P.SEND_BUF) & (o["src_off"] > 0),
     lambda o: o["src_off"] - 1, "read the"),
]  # fmt: skip


@pytest.mark.parametrize("field,mask,value,message", CORRUPTIONS)
def test_corrupt_plan_is_refused(field, mask, value, message):
    plan, sb, rb = _plan_and_sizes()
    assert plan_problem(plan, 8, 2, sb, rb) is None
    bad = _corrupt(plan, mask, field, value)
    problem = plan_problem(bad, 8, 2, sb, rb)
    assert problem is not None and message in problem, problem


def test_plan_for_other_buffers_is_refused():
    plan, sb, rb = _plan_and_sizes()
    assert "send buffer exactly once" in plan_problem(plan, 8, 2, sb + 1, rb)
    assert "outside the" in plan_problem(plan, 8, 2, sb, rb - 1)
    wrong_dtype = P.RankPlan(plan.rank, plan.ops.astype([(f, np.int32) for f in P.OP_FIELDS]),
                             plan.nsteps, plan.buffer_bytes)  # fmt: skip
    assert "dtype" in plan_problem(wrong_dtype, 8, 2, sb, rb)
    empty = P.RankPlan(0, np.zeros(0, P.OP_DTYPE), 3, {})
    assert plan_problem(empty, 8, 2, 0, 0) is None
    assert "send buffer" in plan_problem(empty, 8, 2, 5, 0)


def test_schedule_for_other_traffic_or_node_size_is_refused():
    rng = np.random.default_rng(6)
    d = rng.integers(1, 500, (8, 8))
    other = d.copy()
    other[2, 3] += 1
    sched = schedule(d, 4)
    row, col = int(d[0].sum()), int(d[:, 0].sum())
    assert schedule_problem(sched, d, 4, 0, row, col) is None
    assert "another traffic matrix (entry [2][3]" in schedule_problem(sched, other, 4, 0, row, col)
    assert "for 4 GPUs per node but the topology has 2" in schedule_problem(
        sched, d, 2, 0, row, col
    )
    assert "for 8 ranks" in schedule_problem(sched, d[:4, :4], 4, 0, row, col)
    assert "buffers hold" in schedule_problem(sched, d, 4, 0, row + 1, col)


def test_fingerprint_separates_matrices_and_node_sizes():
    d = np.arange(16).reshape(4, 4)
    assert fingerprint(d, 2) == fingerprint(d.astype(np.int32).copy(), 2)
    e = d.copy()
    e[3, 3] += 1
    assert len({fingerprint(d, 2), fingerprint(e, 2), fingerprint(d, 4),
                fingerprint(d.reshape(2, 8), 2)}) == 4  # fmt: skip
    assert 0 <= fingerprint(d) < 2**63


class _Comm:
    def __init__(self, views):
        self.views = views

    def allgather(self, obj):
        return self.views


def test_agree_names_the_disagreement():
    agree(_Comm([(None, 5), (None, 5)]), None, 5)
    with pytest.raises(ValueError, match="different traffic matrices \\(rank 0 and rank 2"):
        agree(_Comm([(None, 5), (None, 5), (None, 6)]), None, 5)
    with pytest.raises(ValueError, match="x: rank 1 refuses the plan: bad \\(and 2 more ranks\\)"):
        agree(_Comm([(None, 5), ("bad", 5), ("worse", 5), ("bad", 5)]), "bad", 5, "x")


def test_load_refuses_on_every_rank_before_anything_is_posted():
    rng = np.random.default_rng(7)
    d = rng.integers(1, 500, (8, 8))
    stale = schedule(d + np.eye(8, dtype=np.int64), 2)

    def rank(t):
        r = t.topo.rank
        case = AlltoallvCase(d, np.zeros(int(d[r].sum()), np.uint8),
                             np.zeros(int(d[:, r].sum()), np.uint8), r)  # fmt: skip
        ex = PlanExecutor(t)
        try:
            load(ex, stale, case)
        except ValueError as exc:
            return str(exc), t.posted, ex.nsteps
        return None, t.posted, ex.nsteps

    for msg, posted, nsteps in run_ranks(8, 2, rank):
        assert msg and "rank 0 refuses the plan: the schedule was computed for another" in msg
        assert posted == 0 and nsteps == 0


@pytest.mark.parametrize("groups", ["world", "split"])
def test_gpu_check_plan_runs_on_one_rank(groups):
    """The plan ``make gpu-check`` runs on one GPU: to self over rail then node, plus a copy."""
    n = 1000
    plan = self_plan(n, 333)
    assert plan_problem(plan, 1, 1, n, n) is None
    send = np.arange(n, dtype=np.int64).astype(np.uint8)

    def rank(t):
        recv = np.zeros(n, np.uint8)
        ex = PlanExecutor(t, groups)
        ex.bind(plan, send, recv)
        ex.run()
        return recv, ex.nsteps, t.posted

    recv, nsteps, posted = run_ranks(1, 1, rank)[0]
    np.testing.assert_array_equal(recv, send)
    assert nsteps == 2 and posted == 4


def test_per_call_benchmark_pieces():
    """The per-call benchmark's trace tiling and its phases on a small cluster."""
    from commbench.benchmarks import fast_executor as bench

    mats = bench.load_trace(bench.TRACE)
    assert mats.shape[1:] == (32, 32) and (mats.sum(axis=2) == 8192).all()
    d = bench.tiled_trace(mats, 64, 5)
    assert d.shape == (64, 64) and int(d.sum()) == 64 * bench.SIZE
    # block (0, 1) is the next iteration after block (0, 0): its tokens, scaled
    block = d[:32, 32:].astype(float)
    assert np.allclose(block / block.sum(), mats[6] / mats[6].sum(), atol=1e-6)
    small = [np.random.default_rng(k).integers(0, 900, (8, 8)) * 2 for k in range(2)]
    m = bench.per_call(small, 4, 3)
    assert all(len(m[k]) == 3 for k in ("synth", "plan", "bind", "host", "run"))
    assert m["ops"] > 0 and min(m["host"]) > 0
    ahead = bench.ahead_calls(small, 4, 3, xfer_us=50.0)
    assert len(ahead) == 3 and min(ahead) > 0
