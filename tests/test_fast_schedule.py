"""FAST scheduler: transfers() flows, rail alignment, bounds, plans (simulated byte for
byte against MPI_Alltoallv), determinism, corner cases and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

import commbench.kernels.fast as fast
from commbench.cli import main
from commbench.kernels.fast import _core, simulate
from commbench.kernels.fast import plan as P
from commbench.kernels.fast.scheduler import BALANCE_MODES


@st.composite
def cases(draw):
    s = draw(st.integers(1, 4))
    g = draw(st.integers(1, 4))
    p = s * g
    big = draw(st.sampled_from([5, 1000, 10**5]))
    vals = draw(st.lists(st.integers(0, big), min_size=p * p, max_size=p * p))
    d = np.array(vals, dtype=np.int64).reshape(p, p)
    d[d < big // 3] = 0  # plenty of zeros: empty pairs, rows and columns
    opts = {
        "unit": draw(st.sampled_from([1, 2, 3, 8])),
        "strategy": draw(st.sampled_from(fast.STRATEGIES)),
        "max_stages": draw(st.sampled_from([None, "auto", 0, 1, 3])),
        "balance": draw(st.sampled_from(BALANCE_MODES)),
        "max_stage_bytes": draw(st.sampled_from([None, None, big // 2 + 1, 3 * big])),
        "tail": draw(st.sampled_from(["last", "last", "early", 2, 7])),
    }
    if draw(st.booleans()):
        opts["quantum"] = draw(st.sampled_from(["auto", 16, 100]))
    return d, g, opts


def flows_ok(sched) -> None:
    """Following transfers(), every (origin, final) pair's bytes go from origin to final:
    each rank's net flow of the pair is -D at the origin, +D at the final, 0 elsewhere."""
    d = sched.traffic
    p = sched.nranks
    tr = sched.transfers()
    moving = tr[tr.src != tr.dst]
    net = np.zeros((p, p, p), dtype=np.int64)  # origin, final, rank
    np.add.at(net, (moving.origin, moving.final, moving.dst), moving.nbytes)
    np.subtract.at(net, (moving.origin, moving.final, moving.src), moving.nbytes)
    want = np.zeros_like(net)
    o, f = np.nonzero(d)
    off = o != f
    want[o[off], f[off], f[off]] += d[o[off], f[off]]
    want[o[off], f[off], o[off]] -= d[o[off], f[off]]
    assert np.array_equal(net, want)
    selfs = tr[(tr.phase == "intra") & (tr.src == tr.dst)]
    assert np.array_equal(np.sort(selfs.src.to_numpy()), np.flatnonzero(np.diag(d)))
    assert (selfs.nbytes.to_numpy() == np.diag(d)[selfs.src.to_numpy()]).all()
    assert (tr.nbytes > 0).all()


def stages_ok(sched) -> None:
    """Stage rows are rail-aligned and follow the stage's server permutation: at most one
    sending server per receiving server per stage."""
    g = sched.gpus_per_node
    tr = sched.transfers()
    st_rows = tr[tr.phase == "stage"]
    src, dst, k = st_rows.src.to_numpy(), st_rows.dst.to_numpy(), st_rows.stage.to_numpy()
    assert (src % g == dst % g).all() and (src // g != dst // g).all()
    assert (sched.perms[k, src // g] == dst // g).all()
    pairs = {(int(a), int(b)) for a, b in zip(k, dst // g, strict=True)}
    senders = {(int(a), int(b), int(c)) for a, b, c in zip(k, dst // g, src // g, strict=True)}
    assert len(pairs) == len(senders)
    for perm in sched.perms:  # each stage is a permutation of the servers
        assert sorted(perm.tolist()) == list(range(sched.servers))
    caps = sched.weights
    sent = st_rows.groupby(["stage", "src"]).nbytes.sum()
    for (stage, _), nbytes in sent.items():
        assert nbytes <= caps[stage]


def bounds_ok(sched, opts) -> None:
    """T is within the rounding slack of the lower bound; stage + tail bytes fit in T."""
    s, g, unit = sched.servers, sched.gpus_per_node, sched.unit
    slack = (s - 1) * (1 if unit == 1 else (g + 1) * unit) + (s - 1) * sched.quantum
    assert sched.lower_bound <= sched.line_sum <= sched.lower_bound + slack
    assert sched.scheduled_bytes <= sched.line_sum
    assert (np.diff(sched.weights) <= 0).all() and (sched.weights > 0).all()
    if opts.get("max_stages", "auto") is None:
        assert sched.stage_bytes == sched.line_sum and sched.tail_bytes == 0
        assert sched.scheduled_bytes == sched.line_sum
    cap = sched.max_stage_bytes
    if cap is not None:  # cut stages: each at most the cap, rounded up to the unit
        assert (sched.weights <= -(-cap // unit) * unit).all()
    elif s > 1 and opts.get("max_stages", "auto") is None:
        assert sched.nstages <= s * s - 2 * s + 2 or sched.quantum > 1


def plans_ok(sched) -> None:
    """Per-rank plans equal the all-ranks walk, and executing them is MPI_Alltoallv."""
    fresh = fast.schedule(sched.traffic, sched.gpus_per_node, unit=sched.unit,
                          strategy=sched.strategy, quantum=sched.quantum,
                          max_stages=sched.max_stages, balance=sched.balance,
                          max_stage_bytes=sched.max_stage_bytes, tail=sched.tail,
                          first_stage_fraction=sched.first_stage_fraction)  # fmt: skip
    for r, whole in enumerate(sched.plans()):
        one = fresh.plan(r)
        assert np.array_equal(one.ops, whole.ops) and one.buffer_bytes == whole.buffer_bytes
    simulate.check(sched, seed=1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_schedule_properties(case):
    d, g, opts = case
    sched = fast.schedule(d, g, **opts)
    flows_ok(sched)
    stages_ok(sched)
    bounds_ok(sched, opts)
    plans_ok(sched)
    again = fast.schedule(d.copy(), g, **opts)  # deterministic
    assert np.array_equal(again.perms, sched.perms)
    assert np.array_equal(again.weights, sched.weights)
    assert again.transfers().equals(sched.transfers())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_scheduler_with_a_rank_is_schedule_then_plan(case):
    """``Scheduler(G, **opts)(d, rank)`` (one call of the core for the schedule and that
    rank's plan) gives what ``schedule`` then ``plan`` give, for every rank and option."""
    d, g, opts = case
    scheduler = fast.Scheduler(g, **opts)
    whole = fast.schedule(d, g, **opts)
    for r in range(d.shape[0]):
        one = scheduler(d, rank=r)
        assert np.array_equal(one.perms, whole.perms) and np.array_equal(one._tail, whole._tail)
        assert one.summary() | {"synthesis_us": 0} == whole.summary() | {"synthesis_us": 0}
        assert r in one._plans and np.array_equal(one._plans[r].ops, whole.plan(r).ops)
        assert one.plan(r).buffer_bytes == whole.plan(r).buffer_bytes


def test_scheduler_checks_options_once_and_ranks_per_call():
    scheduler = fast.Scheduler(2, strategy="threshold")
    d = np.arange(16).reshape(4, 4)
    assert np.array_equal(scheduler(d).perms, fast.schedule(d, 2, strategy="threshold").perms)
    scheduler._ops_cap = 1  # a short op table: the plan is built again at the counted size
    want = fast.schedule(d, 2, strategy="threshold").plan(3).ops
    assert np.array_equal(scheduler(d, rank=3).plan(3).ops, want)
    for bad in (4, -1, 1.5, "0"):
        with pytest.raises(ValueError, match=f"rank {bad!r} is outside 0..3"):
            scheduler(d, rank=bad)
    with pytest.raises(ValueError, match="unknown strategy 'greedy'"):
        fast.Scheduler(2, strategy="greedy")
    with pytest.raises(ValueError, match="6 ranks, not a multiple of gpus_per_node=4"):
        fast.Scheduler(4)(np.zeros((6, 6), np.int64))


def _bottleneck(a: np.ndarray) -> int:
    """Largest x such that a perfect matching exists on entries >= x (brute force)."""
    best = 0
    for x in np.unique(a[a > 0]):
        r, c = linear_sum_assignment(a >= x, maximize=True)
        if (a[r, c] >= x).all():
            best = int(x)
    return best


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.integers(0, 2**16))
def test_bottleneck_stages_are_bottleneck_matchings(s, seed):
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 50, (2 * s, 2 * s))
    sched = fast.schedule(d, 2, strategy="bottleneck", max_stages=None)
    m, line = fast.server_matrix(d, 2)
    assert line * sched.unit == sched.line_sum
    for perm, w in zip(sched.perms, sched.weights, strict=True):
        assert w == _bottleneck(m)
        m[np.arange(s), perm] -= w
    assert (m == 0).all()


@settings(max_examples=80, deadline=None)
@given(
    s=st.integers(1, 20),
    seed=st.integers(0, 2**32 - 1),
    mode=st.sampled_from([_core.MODE_BVN, _core.MODE_BOTTLENECK, _core.MODE_THRESHOLD]),
    max_stages=st.sampled_from([None, 1, 4]),
    stage_cost=st.sampled_from([0.0, 0.01, 0.2]),
    stage_max=st.sampled_from([0, 300]),
)
def test_decomposition_rebuilds_the_matrix_at_any_entry_width(
    s, seed, mode, max_stages, stage_cost, stage_max
):
    """Every stage is a permutation, the stages and the residual rebuild the matrix,
    bottleneck weights never grow; and the matrix scaled by 2^32 (entries past int32,
    decomposed in int64) gives the same stages, every amount scaled."""
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 1000, (s, s))
    d[d < 400] = 0
    m, line = fast.server_matrix(d, 1)
    limit = s * s + 1 if max_stages is None else max_stages
    cost = stage_cost * line  # as a share of the line sum, so the cut keeps some stages
    a = m.copy()
    perms, weights, k, rest = _core.decompose(a, line, mode, limit, cost, 2.0, 1, stage_max)
    assert k == len(perms) == len(weights) <= limit and (weights > 0).all()
    assert rest == line - weights.sum() >= 0 and (rest == 0 or k == limit or cost > 0)
    rebuilt = a.copy()
    for perm, w in zip(perms, weights, strict=True):
        assert sorted(perm.tolist()) == list(range(s))
        rebuilt[np.arange(s), perm] += w
    assert np.array_equal(rebuilt, m) and (a >= 0).all()
    assert (a.sum(0) == rest).all() and (a.sum(1) == rest).all()
    if mode == _core.MODE_BOTTLENECK:
        assert (np.diff(weights) <= 0).all()
    big = m << 32
    out = _core.decompose(big, line << 32, mode, limit, cost * 2**32, 2.0, 1, stage_max << 32)
    assert np.array_equal(out[0], perms) and np.array_equal(out[1], weights << 32)
    assert out[2] == k and out[3] == rest << 32 and np.array_equal(big, a << 32)


def test_one_server_has_no_scale_out():
    d = np.arange(16, dtype=np.int64).reshape(4, 4) * 10
    sched = fast.schedule(d, 4)
    assert sched.nstages == 0 and sched.lower_bound == 0 and sched.line_sum == 0
    assert set(sched.transfers().phase) == {"intra"}
    simulate.check(sched)


def test_one_gpu_per_server_needs_no_balancing_or_forwarding():
    rng = np.random.default_rng(3)
    d = rng.integers(0, 1000, (5, 5))
    sched = fast.schedule(d, 1, max_stages=None)
    phases = set(sched.transfers().phase)
    assert "balance" not in phases and "redistribute" not in phases
    for pl in sched.plans():
        assert not (pl.ops["group"] == P.NODE).any()
        assert not (pl.ops["src_buf"] == P.STAGE0).any()  # received straight into place
        assert pl.extra_bytes == 0
    simulate.check(sched)


def test_all_zero_traffic():
    sched = fast.schedule(np.zeros((8, 8), dtype=np.int64), 4)
    assert sched.nstages == 0 and sched.scheduled_bytes == 0 and sched.lower_bound == 0
    assert len(sched.transfers()) == 0
    assert all(len(pl.ops) == 0 for pl in sched.plans())
    simulate.check(sched)


def test_single_hot_pair():
    d = np.zeros((8, 8), dtype=np.int64)
    d[1, 6] = 100_003
    sched = fast.schedule(d, 4)
    assert sched.nstages == 1 and sched.lower_bound == 25_001
    assert sched.line_sum == sched.lower_bound == sched.scheduled_bytes
    tr = sched.transfers()
    assert set(tr[tr.phase == "balance"].dst) == {0, 2, 3}  # rank 1 spreads over its server
    simulate.check(sched)


def test_zero_rows_and_columns():
    rng = np.random.default_rng(5)
    d = rng.integers(1, 500, (12, 12))
    d[[0, 5, 7], :] = 0
    d[:, [2, 5, 11]] = 0
    for strategy in fast.STRATEGIES:
        sched = fast.schedule(d, 3, strategy=strategy, unit=4)
        flows_ok(sched)
        simulate.check(sched)


def test_entries_near_2_to_the_40():
    rng = np.random.default_rng(7)
    d = (1 << 40) - rng.integers(0, 1 << 20, (16, 16))
    d[3, :] = 0
    sched = fast.schedule(d, 4, unit=8, max_stages=None)
    flows_ok(sched)
    stages_ok(sched)
    bounds_ok(sched, {"max_stages": None})
    for r, pl in enumerate(sched.plans()):  # reads and writes tile the buffers exactly
        ops = pl.ops
        for mask, off, total in (
            ((ops["kind"] != P.RECV) & (ops["src_buf"] == P.SEND_BUF), "src_off", d[r].sum()),
            ((ops["kind"] != P.SEND) & (ops["dst_buf"] == P.RECV_BUF), "dst_off", d[:, r].sum()),
        ):
            o, n = ops[off][mask], ops["nbytes"][mask]
            if total == 0:
                assert len(o) == 0
                continue
            order = np.argsort(o)
            o, n = o[order], n[order]
            assert (o[1:] == o[:-1] + n[:-1]).all() and o[0] == 0 and o[-1] + n[-1] == total


def test_unit_alignment_never_drops_a_tail():
    d = np.array([[0, 10, 7, 1], [13, 0, 3, 9], [2, 2, 0, 31], [5, 0, 17, 0]] * 2)
    d = np.hstack([d, d])  # 8 x 8, sizes not multiples of the unit
    for unit in (1, 2, 4, 8, 64):
        sched = fast.schedule(d, 2, unit=unit, max_stages=None)
        tr = sched.transfers()
        for _, rows in tr[tr.src != tr.dst].groupby(["phase", "origin", "final"], observed=True):
            assert (rows.nbytes % unit != 0).sum() <= 1  # only the pair's last piece is short
        simulate.check(sched)


def test_tail_strategies_and_cost_cut():
    from commbench.harness.workloads import generate

    d = generate("zipf:0.8", 48, 1 << 20, seed=2)
    exact = fast.schedule(d, 4, max_stages=None)
    capped = fast.schedule(d, 4, max_stages=5)
    assert capped.nstages == 5 and capped.tail_bytes > 0
    assert capped.scheduled_bytes <= exact.line_sum
    simulate.check(capped)
    counts = [fast.schedule(d, 4, max_stages=None, stage_cost_bytes=c, max_stage_bytes=None).nstages
              for c in (0, 1e3, 1e4, 1e5, 1e12)]  # fmt: skip
    assert counts == sorted(counts, reverse=True) and counts[0] == exact.nstages
    assert counts[-1] == 0  # a huge per-stage cost: everything in the tail
    alone = fast.schedule(d, 4, max_stages=0)
    assert alone.nstages == 0 and alone.tail_bytes > 0
    simulate.check(alone)
    quant = fast.schedule(d, 4, quantum="auto", max_stages=None)
    assert quant.nstages < exact.nstages
    assert quant.line_sum <= exact.line_sum * 1.01 + quant.quantum
    assert exact.cost_bytes(1000.0) == exact.nstages * 1000.0 + exact.stage_bytes


def test_stage_cap_and_pipelined_balancing():
    from commbench.harness.workloads import generate

    d = generate("zipf:0.8", 32, 1 << 20, seed=3)
    whole = fast.schedule(d, 4, max_stages=None, max_stage_bytes=None)
    cut = fast.schedule(d, 4, max_stages=None, max_stage_bytes=50_000)
    assert cut.nstages > whole.nstages and (cut.weights <= 50_000).all()
    assert cut.stage_bytes == whole.stage_bytes  # same permutations, same capacity
    for k in range(whole.nstages):  # every stage's weight is carried by its parts
        same = (cut.perms == whole.perms[k]).all(axis=1)
        assert cut.weights[same].sum() >= whole.weights[k]
    assert cut.extra_memory()["total_bytes"] < whole.extra_memory()["total_bytes"]
    # "auto" cap: AUTO_STAGE_COST_MULTIPLE x the per-stage cost, none without one
    auto = fast.schedule(d, 4, stage_cost_bytes=1000, max_stage_bytes="auto")
    assert auto.max_stage_bytes == 32_000
    assert fast.schedule(d, 4, max_stage_bytes="auto").max_stage_bytes is None
    assert fast.schedule(d, 4, stage_cost_bytes=1000).max_stage_bytes is None  # default
    pro = fast.schedule(d, 4, max_stage_bytes=50_000, balance="prologue")
    pipe = fast.schedule(d, 4, max_stage_bytes=50_000, balance="pipelined")
    tp, tq = pro.transfers(), pipe.transfers()
    bal_p, bal_q = tp[tp.phase == "balance"], tq[tq.phase == "balance"]
    assert (bal_p.step == 0).all() and bal_q.step.nunique() > 1
    assert bal_p.nbytes.sum() == bal_q.nbytes.sum()
    assert pro.extra_memory() == pipe.extra_memory()  # same buffers, bytes lent later
    # a GPU lends for rail step j during step j: before the stage row that sends it
    rail = tq[tq.phase.isin(["stage", "tail"]) & (tq.origin != tq.src)]
    first_send = rail.groupby(["origin", "src"]).step.min()
    first_lend = bal_q.groupby(["src", "dst"]).step.min()
    assert (first_lend.loc[first_send.index].to_numpy() == first_send.to_numpy() - 1).all()
    simulate.check(pipe)


def test_early_tail_joins_a_stage_and_changes_nothing_else():
    from commbench.harness.workloads import generate

    d = generate("zipf:0.8", 48, 1 << 20, seed=2)
    last = fast.schedule(d, 4, max_stages=5)
    assert last.tail == "last" and last.nsteps == 5 + 3
    tl = last.transfers()
    k = int(tl[tl.phase == "stage"].step.max())
    assert (tl[tl.phase == "tail"].step == k + 1).all()
    for tail, at in (("early", 1), (3, 3), (99, 5)):  # past the last stage: with the last
        sched = fast.schedule(d, 4, max_stages=5, tail=tail)
        assert sched.nsteps == 5 + 2 and sched.summary()["tail"] == sched.tail
        assert np.array_equal(sched.weights, last.weights)
        assert sched.tail_bytes == last.tail_bytes
        tr = sched.transfers()
        assert (tr[tr.phase == "tail"].step == at).all()
        drain = tr[(tr.phase == "redistribute") & (tr.stage < 0)]
        assert len(drain) and (drain.step == at + 1).all()
        # the same moves, only some in other steps; the tail's lending one step before it
        cols = ["phase", "stage", "src", "dst", "origin", "final", "nbytes"]
        assert (
            tr[cols]
            .sort_values(cols)
            .reset_index(drop=True)
            .equals(tl[cols].sort_values(cols).reset_index(drop=True))
        )
        rail = tr[(tr.phase == "tail") & (tr.origin != tr.src)]
        keys = set(zip(rail.origin, rail.src, rail.final, strict=True))
        bal = tr[tr.phase == "balance"]
        first_lend = bal.groupby(["src", "dst", "final"]).step.min()
        assert keys and all(first_lend[key] <= at - 1 for key in keys)
        assert sched.extra_memory() == last.extra_memory()
        simulate.check(sched)
        plans_ok(sched)
    # no stages: the tail is all there is, in step 1 whatever was asked
    alone = fast.schedule(d, 4, max_stages=0, tail="early")
    assert alone.nsteps == 3
    simulate.check(alone)


def test_first_stage_fraction_splits_the_first_stage():
    from commbench.harness.workloads import generate

    d = generate("zipf:0.8", 48, 1 << 20, seed=2)
    base = fast.schedule(d, 4, max_stages=5)
    for balance in BALANCE_MODES:
        for frac in (0.125, 0.5, 0.999):
            sched = fast.schedule(d, 4, max_stages=5, first_stage_fraction=frac, balance=balance)
            w0 = int(base.weights[0])
            lead = int(sched.weights[0])
            assert (
                sched.nstages == base.nstages + 1
                and sched.summary()["first_stage_fraction"] == frac
            )
            assert 0 < lead < w0 and lead + int(sched.weights[1]) == w0
            assert abs(lead - frac * w0) <= max(1, w0 // 100) or lead == w0 - 1
            assert np.array_equal(sched.perms[0], sched.perms[1])
            assert np.array_equal(sched.weights[2:], base.weights[1:])
            assert sched.tail_bytes == base.tail_bytes
            assert sched.scheduled_bytes == base.scheduled_bytes
            simulate.check(sched)
            plans_ok(sched)
    tr = fast.schedule(d, 4, max_stages=5, first_stage_fraction=0.125).transfers()
    lend0 = tr[(tr.phase == "balance") & (tr.step == 0)].nbytes.sum()
    assert 0 < lend0 < base.transfers().query("phase == 'balance' and step == 0").nbytes.sum()
    for bad in (0, 1, -0.5, "x", True):
        with pytest.raises(ValueError, match="first_stage_fraction"):
            fast.schedule(d, 4, first_stage_fraction=bad)


def test_summary_and_memory():
    from commbench.harness.workloads import generate

    sched = fast.schedule(generate("zipf:0.8", 32, 1 << 16, seed=1), 8)
    sm = sched.summary()
    assert sm["stages"] == sched.nstages and sm["lower_bound_bytes"] == sched.lower_bound
    mem = sched.extra_memory()
    per_rank = [pl.extra_bytes for pl in sched.plans()]
    assert mem["max_rank_bytes"] == max(per_rank) and mem["total_bytes"] == sum(per_rank)
    assert 0 < mem["fraction"] < 1
    assert fast.compile_seconds() is not None and fast.warmup() == fast.compile_seconds()
    assert len(sched.stages) == sched.nstages and sched.stages[0].nbytes == sched.weights[0]


@pytest.mark.parametrize(
    "traffic, g, message",
    [
        (np.zeros((3, 4), dtype=np.int64), 1, r"square P x P matrix .* shape \(3, 4\)"),
        (np.zeros(4, dtype=np.int64), 1, "square"),
        (np.array([[0, -1], [2, 0]]), 1, r"traffic\[0\]\[1\] is negative \(-1\)"),
        (np.array([[0, np.nan], [2, 0]]), 1, r"integer byte counts.*\[0\]\[1\] is nan"),
        (np.array([[0.0, 1.0], [2.0, 0.0]]), 1, "integer byte counts, got dtype float64"),
        (np.zeros((6, 6), dtype=np.int64), 4, "6 ranks, not a multiple of gpus_per_node=4"),
        (np.zeros((4, 4), dtype=np.int64), 0, "gpus_per_node must be at least 1"),
        (np.zeros((4, 4), dtype=np.int64), 2.0, "gpus_per_node must be an integer"),
        (np.full((2, 2), 2**62, dtype=np.uint64), 1, "too large"),
        (np.array([["a"]]), 1, "integer byte counts"),
    ],
)
def test_bad_traffic(traffic, g, message):
    with pytest.raises(ValueError, match=message):
        fast.schedule(traffic, g)


@pytest.mark.parametrize(
    "opts, message",
    [
        ({"strategy": "greedy"}, "unknown strategy 'greedy'"),
        ({"unit": 0}, "unit must be >= 1"),
        ({"max_stages": -1}, "max_stages must be >= 0"),
        ({"quantum": 0}, "quantum must be >= 1"),
        ({"stage_cost_bytes": -1}, "stage_cost_bytes must be"),
        ({"tail_penalty": 0.5}, "tail_penalty must be >= 1"),
        ({"balance": "eager"}, "unknown balance 'eager'"),
        ({"max_stage_bytes": 0}, "max_stage_bytes must be >= 1"),
        ({"tail": "first"}, "unknown tail 'first'"),
        ({"tail": 0}, "tail must be >= 1"),
        ({"tail": True}, "unknown tail True"),
    ],
)
def test_bad_options(opts, message):
    with pytest.raises(ValueError, match=message):
        fast.schedule(np.ones((4, 4), dtype=np.int64), 2, **opts)
    with pytest.raises(ValueError, match="rank 4 is outside"):
        fast.schedule(np.ones((4, 4), dtype=np.int64), 2).plan(4)


def test_simulator_catches_a_broken_plan():
    sched = fast.schedule(np.full((4, 4), 10, dtype=np.int64), 2)
    pl = sched.plan(0)
    ops = pl.ops.copy()
    recv = np.flatnonzero(ops["kind"] == P.RECV)[0]
    ops["nbytes"][recv] -= 1
    sched._plans[0] = P.RankPlan(0, ops, pl.nsteps, pl.buffer_bytes)
    with pytest.raises(simulate.PlanError, match="expects"):
        simulate.check(sched)


def test_cli_schedule(capsys):
    assert main(["schedule", "-w", "zipf:0.8@1", "-s", "4", "-g", "2", "--size", "64K",
                 "-r", "2", "--show"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    for key in ("stages", "T (padded line sum)", "lower bound", "synthesis", "numba load"):
        assert key in out
    assert "server -> server" in out
    assert main(["schedule", "-s", "3", "-g", "2", "--strategy", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown strategy" in err[0]


def test_small_op_tables_are_rebuilt_at_the_counted_size(monkeypatch):
    from commbench.harness.workloads import generate
    from commbench.kernels.fast import scheduler

    d = generate("zipf:0.8", 16, 1 << 12, seed=4)
    want = fast.schedule(d, 4)
    plans = [pl.ops.copy() for pl in want.plans()]
    rows = want.transfers()
    monkeypatch.setattr(scheduler, "_ops_guess", lambda *args: 1)
    small = fast.schedule(d, 4)
    assert all(np.array_equal(small.plan(r).ops, plans[r]) for r in range(16))
    assert small.transfers().equals(rows)
    simulate.check(small)


def test_schedule_ahead_is_schedule_on_another_thread():
    from commbench.harness.workloads import generate

    d = generate("zipf:0.8@3", 32, 1 << 20, unit=2)
    future = fast.schedule_ahead(d, 4, rank=5, unit=2, tail="early")
    d[:] = 0  # the caller may reuse its array at once: the matrix was copied
    ahead = future.result(timeout=60)
    fresh = fast.schedule(generate("zipf:0.8@3", 32, 1 << 20, unit=2), 4, unit=2, tail="early")
    assert np.array_equal(ahead.perms, fresh.perms) and np.array_equal(ahead.weights, fresh.weights)
    assert 5 in ahead._plans and np.array_equal(ahead.plan(5).ops, fresh.plan(5).ops)
    bad = fast.schedule_ahead(np.ones((6, 6), dtype=np.int64), 4)
    with pytest.raises(ValueError, match="not a multiple of gpus_per_node=4"):
        bad.result(timeout=60)


def test_threads_share_the_matrix_pass_and_change_nothing(monkeypatch):
    """``threads`` splits the regions pass into row blocks (any split, any node size,
    units that are not powers of two): the schedule and plans are the one-thread ones."""
    from commbench.kernels.fast import scheduler

    monkeypatch.setattr(scheduler, "PARALLEL_MIN_RANKS", 1)
    rng = np.random.default_rng(11)
    for p, g, unit, threads in ((8, 2, 1, 2), (12, 3, 3, 5), (32, 4, 2, 3), (48, 8, 8, 7)):
        d = rng.integers(0, 5000, (p, p)) * (rng.random((p, p)) < 0.7)
        one = fast.schedule(d, g, unit=unit)
        many = fast.schedule(d, g, unit=unit, threads=threads)
        assert one.summary() | {"synthesis_us": 0} == many.summary() | {"synthesis_us": 0}
        assert np.array_equal(one.perms, many.perms) and np.array_equal(one._tail, many._tail)
        assert all(np.array_equal(a.ops, b.ops) for a, b in zip(one.plans(), many.plans(),
                                                                  strict=True))  # fmt: skip
    with pytest.raises(ValueError, match="threads must be >= 1"):
        fast.schedule(d, 8, threads=0)


def _cut_reference(weights, line: int, alpha: float, penalty: float) -> int:
    """How many of ``weights`` the stage-count cut keeps (its rule, restated)."""
    best, keep, done, fixed = np.inf, 0, 0, 0.0
    for k in range(len(weights) + 1):
        rest = line - done
        cost = fixed + done + (alpha + penalty * rest if rest > 0 else 0.0)
        if cost < best:
            best, keep = cost, k
        if k < len(weights):
            done += int(weights[k])
            fixed += alpha
    return keep


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    s=st.integers(2, 12),
    seed=st.integers(0, 2**32 - 1),
    law=st.sampled_from(["zipf:0.8", "zipf:0.3", "hotspot", "random"]),
    alpha_share=st.floats(1e-4, 0.5),
    penalty=st.sampled_from([1.0, 1.5, 2.0, 4.0]),
    max_stages=st.sampled_from(["auto", None, 3]),
    quantum=st.sampled_from([None, 64]),
)
def test_stage_cost_stops_the_decomposition_early_without_changing_it(
    s, seed, law, alpha_share, penalty, max_stages, quantum
):
    """With a stage cost the decomposition stops once the cut can keep no more stages:
    the kept stages are those the cut picks from the whole (uncut) decomposition."""
    from commbench.harness.workloads import generate

    d = generate(f"{law}@{seed}", s * 4, 1 << 16)
    whole = fast.schedule(d, 4, max_stages=max_stages, quantum=quantum)
    alpha = float(alpha_share * whole.line_sum)
    cut = fast.schedule(d, 4, max_stages=max_stages, quantum=quantum, stage_cost_bytes=alpha,
                        tail_penalty=penalty)  # fmt: skip
    keep = _cut_reference(whole.weights, whole.line_sum, alpha, penalty)
    assert cut.nstages == keep
    assert np.array_equal(cut.weights, whole.weights[:keep])
    assert np.array_equal(cut.perms, whole.perms[:keep])
    assert keep <= cut.computed_stages <= whole.computed_stages
