"""Cost model: closed forms, FAST's stage arithmetic, incast, bounds, bad constants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import commbench.kernels.fast
from commbench.kernels.model import Fabric, lower_bound, step_finish
from commbench.kernels.model import allreduce as ar
from commbench.kernels.model import alltoallv as a2a
from commbench.kernels.model import nccl as nccl_table

# test fixture constants (round numbers so the hand computations stay readable)
NIC, NIC_US, UP, UP_US, STAGE = 50.0, 2.0, 400.0, 1.0, 5.0


def fab(g: int = 4, **kw) -> Fabric:
    base = dict(
        gpus_per_node=g, nic_GBps=NIC, nic_us=NIC_US, scaleup_GBps=UP, scaleup_us=UP_US,
        stage_us=STAGE,
    )  # fmt: skip
    base.update(kw)
    return Fabric(**base)


def us(nbytes: float, gbps: float) -> float:
    return nbytes / (gbps * 1e3)


def schedule(traffic: np.ndarray, g: int, **opts):
    opts.setdefault("max_stages", None)
    return commbench.kernels.fast.schedule(traffic, g, **opts)


# ---------------------------------------------------------------- constants


@pytest.mark.parametrize(
    "field,value",
    [
        ("nic_GBps", 0.0),
        ("nic_GBps", -1.0),
        ("nic_GBps", math.inf),
        ("nic_GBps", math.nan),
        ("scaleup_GBps", 0.0),
        ("scaleup_peer_GBps", -5.0),
        ("reduce_GBps", 0.0),
        ("nic_us", -1.0),
        ("stage_us", math.nan),
        ("incast", -0.1),
        ("gpus_per_node", 0),
        ("nic_GBps", "fast"),
    ],
)
def test_bad_constants_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        fab(**{field: value})


def test_with_validates_and_rejects_unknown_names():
    f = fab()
    assert f.with_(stage_us=2.0).stage_us == 2.0
    with pytest.raises(ValueError, match="nic_GBps"):
        f.with_(nic_GBps=0)
    with pytest.raises(ValueError, match="unknown"):
        f.with_(bandwidth=1.0)


def test_peer_link_defaults_to_the_port():
    assert fab().scaleup_peer_GBps == UP
    assert fab(scaleup_peer_GBps=50.0).scaleup_peer_GBps == 50.0


# ---------------------------------------------------------------- all-to-allv closed forms


def test_uniform_fanout_closed_form():
    g, s, b = 4, 3, 6000
    p = g * s
    d = np.full((p, p), b, dtype=np.int64)
    pred = a2a.fanout(d, fab(g))
    cross = us((p - g) * b, NIC) + NIC_US
    intra = us((g - 1) * b, UP) + UP_US
    assert pred.rank_finish_us == pytest.approx(np.full(p, STAGE + max(cross, intra)))
    assert pred.lower_bound_us == pytest.approx(us((p - g) * b, NIC))


def test_uniform_spreadout_closed_form():
    g, s, b = 2, 3, 1000
    p = g * s
    d = np.full((p, p), b, dtype=np.int64)
    pred = a2a.spreadout(d, fab(g))
    # step k: one flow per rank; cross-node unless the shifted peer shares the node
    per_step = []
    for k in range(1, p):
        same = [(r // g) == ((r + k) % p) // g for r in range(p)]
        per_step.append(STAGE + (UP_US + us(b, UP) if all(same) else NIC_US + us(b, NIC)))
    assert pred.time_us == pytest.approx(sum(per_step))
    assert pred.info["steps"] == p - 1


def test_permutation_closed_form():
    g, s, x = 4, 4, 8000
    p = g * s
    d = np.zeros((p, p), dtype=np.int64)
    d[np.arange(p), (np.arange(p) + g) % p] = x  # every rank to the same GPU of the next node
    f = fab(g)
    assert a2a.fanout(d, f).rank_finish_us == pytest.approx(np.full(p, STAGE + NIC_US + us(x, NIC)))
    # spread-out: p - 1 steps, only step g carries bytes
    assert a2a.spreadout(d, f).time_us == pytest.approx((p - 1) * STAGE + NIC_US + us(x, NIC))
    # FAST: rail-aligned already, nothing to balance or redistribute: one step, one stage
    pred = a2a.fast(d, schedule(d, g).transfers(), f)
    assert pred.info["stages"] == 1  # the server matrix is one cyclic permutation
    assert pred.info["prologue_us"] == 0 and pred.info["epilogue_us"] == 0
    assert pred.time_us == pytest.approx(pred.info["stages"] * (STAGE + NIC_US) + us(x, NIC))


def test_single_hot_pair_closed_form():
    g, x = 4, 4000
    p = 2 * g
    d = np.zeros((p, p), dtype=np.int64)
    d[0, p - 1] = x
    f = fab(g)
    lb = a2a.lower_bound(d, f)
    assert lb["lower_bound_us"] == pytest.approx(us(x / g, NIC))
    fan = a2a.fanout(d, f)
    assert fan.time_us == pytest.approx(STAGE + NIC_US + us(x, NIC))
    assert fan.rank_finish_us[1:-1] == pytest.approx(STAGE)  # uninvolved ranks idle
    sched = schedule(d, g)
    pred = a2a.fast(d, sched.transfers(), f)
    lend = UP_US + us(x * (g - 1) / g, UP)  # GPU 0 lends 3/4 of it over its port
    rail = NIC_US + us(x / g, NIC)  # one stage, every GPU of server 0 sends x/4
    drain = UP_US + us(x * (g - 1) / g, UP)  # GPU 7 takes 3/4 in over its port
    assert pred.time_us == pytest.approx(3 * STAGE + lend + rail + drain)
    assert pred.info["prologue_us"] == pytest.approx(STAGE + lend)
    assert pred.info["epilogue_us"] == pytest.approx(STAGE + drain)
    # pipelined balancing: the stage's lending is the prologue (stage 1 has nothing before)
    pipe = a2a.fast(d, sched.transfers(), f, balance="pipelined")
    assert pipe.time_us == pytest.approx(pred.time_us)


def test_fast_scaleout_time_is_lower_bound_plus_stage_costs():
    """Uniform traffic: every NIC sends its stage's weight in every stage."""
    g, s, b = 4, 5, 2048
    p = g * s
    d = np.full((p, p), b, dtype=np.int64)
    f = fab(g)
    sched = schedule(d, g)
    pred = a2a.fast(d, sched.transfers(), f)
    k = pred.info["stages"]
    assert k == sched.nstages and k >= s - 1
    assert sched.scheduled_bytes == sched.lower_bound
    expect = us(sched.lower_bound, NIC) + k * (STAGE + NIC_US)
    assert pred.info["stages_us"] == pytest.approx(expect)
    assert pred.info["stage_fixed_us"] == pytest.approx(k * (STAGE + NIC_US))
    assert pred.lower_bound_us == pytest.approx(us(sched.lower_bound, NIC))


def test_a_fast_stage_pays_the_tail_of_its_rail_not_of_every_nic():
    """A measured tail (the slowest of n NICs sending at once, ``fabric_tail``) is paid by
    each FAST stage over one rail's NICs, one a server: the rail's barrier starts a stage
    where the rail's last NIC has ended, not the whole machine's; a step of all the NICs
    with no such barrier (fan-out) pays the tail of all of them."""
    g, s, b, tail = 2, 4, 1 << 16, 1.1
    p = g * s
    d = np.full((p, p), b, dtype=np.int64)
    f = fab(g, fabric_tail=((1, tail),))
    sched = schedule(d, g)
    pred = a2a.fast(d, sched.transfers(), f)
    k = pred.info["stages"]
    rail = us(sched.lower_bound, NIC) * tail ** math.log2(s)  # the tail of s NICs
    assert pred.info["stages_us"] == pytest.approx(rail + k * (STAGE + NIC_US))
    everyone = step_finish(f, np.zeros(p), np.arange(p), (np.arange(p) + g) % p, np.full(p, b))
    assert everyone.max() == pytest.approx(STAGE + NIC_US + us(b, NIC) * tail ** math.log2(p))
    rails = step_finish(f, np.zeros(p), np.arange(p), (np.arange(p) + g) % p, np.full(p, b),
                        tail_nics=s)  # fmt: skip
    assert rails.max() == pytest.approx(STAGE + NIC_US + us(b, NIC) * tail ** math.log2(s))


@settings(max_examples=25, deadline=None)
@given(
    s=st.integers(1, 4),
    g=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 2**31),
    zeros=st.floats(0, 0.8),
)
def test_fast_stages_never_beat_their_bytes(s, g, seed, zeros):
    """With free scale-up, the stages take at most Σ(stage max bytes)/B + K fixed costs,
    and no modelled pattern beats the lower bound."""
    p = s * g
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 10_000, (p, p)) * (rng.random((p, p)) >= zeros)
    f = fab(g, scaleup_GBps=math.inf, scaleup_us=0.0)
    sched = schedule(d, g)
    tr = sched.transfers()
    pred = a2a.fast(d, tr, f)
    k = pred.info["stages"]
    bound = us(pred.info["scheduled_nic_bytes"], NIC) + k * (STAGE + NIC_US)
    assert pred.info["stages_us"] <= bound + 1e-6
    f2 = fab(g)
    for got in (
        a2a.fanout(d, f2),
        a2a.spreadout(d, f2),
        a2a.fast(d, tr, f2),
        a2a.fast(d, tr, f2, balance="pipelined"),
        a2a.balance_only(d, tr, f2),
    ):
        assert got.time_us >= got.lower_bound_us - 1e-9
        assert got.rank_finish_us.shape == (p,)


def test_incast_makes_fanout_slower_than_spreadout():
    g, s, b = 1, 16, 1 << 20
    p = g * s
    d = np.full((p, p), b, dtype=np.int64)
    np.fill_diagonal(d, 0)
    calm, lossy = fab(g, stage_us=1.0), fab(g, stage_us=1.0, incast=0.2)
    assert a2a.fanout(d, calm).time_us < a2a.spreadout(d, calm).time_us
    assert a2a.fanout(d, lossy).time_us > a2a.spreadout(d, lossy).time_us
    # spread-out has one sender per NIC and step: incast does not touch it
    assert a2a.spreadout(d, lossy).time_us == pytest.approx(a2a.spreadout(d, calm).time_us)
    # fan-in to one NIC: 15 senders share it at 1/(1 + 0.2 * 14) of its rate
    hot = np.zeros((p, p), dtype=np.int64)
    hot[1:, 0] = b
    fan = a2a.fanout(hot, lossy)
    assert fan.time_us == pytest.approx(1.0 + NIC_US + us(15 * b, NIC) * (1 + 0.2 * 14))
    assert fan.time_us > a2a.spreadout(hot, lossy).time_us


def test_fanout_stragglers_follow_the_hot_receiver():
    g, s, b = 1, 8, 1000
    p = g * s
    d = np.full((p, p), b, dtype=np.int64)
    d[:, 3] = 20 * b
    np.fill_diagonal(d, 0)
    fin = a2a.fanout(d, fab(g)).rank_finish_us
    # everybody sends to rank 3, so everybody waits for rank 3's NIC
    assert fin == pytest.approx(np.full(p, fin[3]))
    # without the hot column nobody waits that long
    assert a2a.fanout(np.where(d == 20 * b, b, d), fab(g)).time_us < fin[3]


def test_peer_link_caps_one_flow():
    f = fab(2, scaleup_GBps=300.0, scaleup_peer_GBps=50.0)
    out = step_finish(f, np.zeros(2), np.array([0]), np.array([1]), np.array([1e6]))
    assert out == pytest.approx(STAGE + UP_US + us(1e6, 50.0))


def test_msg_cost_is_paid_per_posted_message():
    f = fab(1, msg_us=0.5)
    out = step_finish(f, np.zeros(3), np.array([0, 0]), np.array([1, 2]), np.array([0, 100]))
    # rank 0 posts one message (the zero-byte one is skipped), rank 2 receives one
    assert out[1] == pytest.approx(STAGE)
    assert out[0] == pytest.approx(STAGE + 0.5 + NIC_US + us(100, NIC))


def test_bad_traffic_is_refused():
    with pytest.raises(ValueError, match="square"):
        a2a.fanout(np.zeros((2, 3), dtype=np.int64), fab(1))
    with pytest.raises(ValueError, match="negative"):
        a2a.fanout(np.array([[0, -1], [0, 0]]), fab(1))
    with pytest.raises(ValueError, match="multiple"):
        lower_bound(np.zeros((6, 6), dtype=np.int64), fab(4))
    with pytest.raises(ValueError, match="integer"):
        a2a.spreadout(np.zeros((2, 2)), fab(1))


def test_transfers_table_checks():
    d = np.full((4, 4), 100, dtype=np.int64)
    tr = schedule(d, 2).transfers()
    with pytest.raises(ValueError, match="lacks"):
        a2a.fast(d, tr.drop(columns=["origin"]), fab(2))
    bad = tr.copy()
    bad["phase"] = bad["phase"].astype(str).replace("stage", "bogus")
    with pytest.raises(ValueError, match="bogus"):
        a2a.fast(d, bad, fab(2))
    with pytest.raises(ValueError, match="balance"):
        a2a.fast(d, tr, fab(2), balance="later")


def test_structured_array_table_matches_dataframe():
    rng = np.random.default_rng(3)
    d = rng.integers(0, 5000, (8, 8))
    tr = schedule(d, 2).transfers()
    rec = np.rec.fromarrays(
        [tr[c].astype(str).to_numpy() if c == "phase" else tr[c].to_numpy() for c in tr.columns],
        names=list(tr.columns),
    )
    assert a2a.fast(d, rec, fab(2)).time_us == pytest.approx(a2a.fast(d, tr, fab(2)).time_us)


def test_balance_only_has_incast_and_no_stages():
    rng = np.random.default_rng(7)
    g, s = 2, 6
    d = rng.integers(0, 100_000, (g * s, g * s))
    tr = schedule(d, g).transfers()
    f = fab(g, incast=0.1)
    bo = a2a.balance_only(d, tr, f)
    assert bo.info["max_incast"] == s - 1
    assert bo.time_us >= bo.lower_bound_us


# ---------------------------------------------------------------- all-reduce closed forms


def test_recursive_doubling_power_of_two_nodes():
    n, nodes = 1 << 20, 8
    f = fab(1, reduce_GBps=200.0)
    pred = ar.recursive_doubling(n, nodes, f)
    # each step a grouped call (stage_us, a send and a receive posted) as step_finish's
    step = STAGE + NIC_US + us(n, NIC) + us(n, 200.0)
    assert pred.rank_finish_us == pytest.approx(np.full(nodes, 3 * step))
    # g = 1: NVRAR is the same butterfly on LL8 cells (the LL share of the NIC: 1/4) plus
    # the transport's put cost, one phase
    nv = ar.nvrar(n, nodes, f.with_(put_us=3.0))
    assert nv.time_us == pytest.approx(STAGE + 3 * (3.0 + NIC_US + us(4 * n, NIC) + us(n, 200.0)))
    # without LL8: recursive doubling's bytes, one launch instead of a call per step
    nv = ar.nvrar(n, nodes, f, ll8=False).time_us
    assert nv == pytest.approx(pred.time_us - 2 * STAGE)


def test_recursive_doubling_folds_a_non_power_of_two():
    n, nodes = 4096, 3
    f = fab(1)
    step = STAGE + NIC_US + us(n, NIC)
    pred = ar.recursive_doubling(n, nodes, f)
    # fold rank 2 into 0, one exchange between 0 and 1, send the result back to 2
    assert pred.rank_finish_us == pytest.approx([3 * step, 2 * step, 3 * step])


def test_flat_recursive_doubling_uses_scaleup_for_near_partners():
    n, g, nodes = 1 << 16, 4, 2
    pred = ar.recursive_doubling(n, nodes, fab(g))
    intra, inter = STAGE + UP_US + us(n, UP), STAGE + NIC_US + us(n, NIC)
    assert pred.time_us == pytest.approx(2 * intra + inter)


def test_rabenseifner_crosses_nodes_in_the_implementation_s_order():
    # 4 x 2: this suite's rabenseifner halves with r ^ 4 first (n/2, across nodes), then
    # r ^ 2 (n/4, across), r ^ 1 (n/8, inside); the all-gather mirrors it. Open MPI's
    # (under ``mpi``) starts with r ^ 1, so only n/4 and n/8 cross.
    from commbench.analysis.tiers import allreduce_hops

    n, g, nodes = 1 << 20, 2, 4
    f = fab(g, scaleup_GBps=math.inf, scaleup_us=0.0, nic_us=0.0, stage_us=0.0)
    ours = ar.rabenseifner(n, nodes, f)
    assert ours.time_us == pytest.approx(2 * us(n / 2 + n / 4, NIC))
    hops, _ = allreduce_hops(n, g * nodes, g, "rabenseifner")  # the implementation's bytes
    node = np.arange(g * nodes) // g
    assert ours.time_us == pytest.approx(us(hops[0][node != node[0]].sum(), NIC))
    ompi = ar.rabenseifner(n, nodes, f, nearest_first=True)
    assert ompi.time_us == pytest.approx(2 * us(n / 4 + n / 8, NIC))
    assert ar.mpi(n, nodes, f.with_(gpus_per_node=1)).info["algo"] == "rabenseifner"


def test_a_token_bucket_frees_each_nic_s_first_bytes_and_refills_at_its_rate():
    # 100 Mbit/s: 12.5 B/us; a step's fixed part (stage, latency) refills 1312.5 B
    f = fab(1, nic_GBps=0.0125, nic_us=100.0)
    shaped = f.with_(nic_burst_bytes=15000.0)
    step = STAGE + 100.0
    rank = np.arange(8)

    def one_call(n: int, fabric) -> float:  # recursive doubling from full buckets
        steps = [(k, n, n) for k in range(3)]
        return float(ar._butterfly(fabric, rank, np.zeros(8), steps, fold=(n, n))[0].max())

    # three steps of 4 KiB: the full bucket (15 KB, +1312.5 B a step) covers every byte
    assert one_call(4096, shaped) == pytest.approx(3 * step)
    plain = ar.recursive_doubling(4096, 8, f).time_us
    assert plain == pytest.approx(3 * (step + 4096 / 12.5))
    # 1 MiB: the first step gets the bucket, the next two what refills in their own
    n = 1 << 20
    assert one_call(n, f) - one_call(n, shaped) == pytest.approx((15000 + 2 * step * 12.5) / 12.5)
    # a ring's 14 steps of n/8 refill it at every step
    saved = ar.ring(n, 8, f).time_us - ar.ring(n, 8, shaped).time_us
    assert 13 * step < saved < (15000 + 13 * step * 12.5) / 12.5
    assert ar.ring(4096, 8, shaped).time_us < ar.ring(4096, 8, f).time_us


def test_a_timed_loop_s_call_finds_the_buckets_as_the_previous_call_left_them():
    """The harness runs a call again and again, a barrier between: a NIC sending more per
    call than refills over the loop's period runs at its rate on average (the period is
    its bytes over the rate), one sending less finds its bucket as full as after a rest."""
    f = fab(1, nic_GBps=0.0125, nic_us=100.0)
    shaped = f.with_(nic_burst_bytes=15000.0)
    step, barrier = STAGE + 100.0, ar._barrier_us(shaped, 8)
    assert barrier == pytest.approx(3 * 100.0)  # a latency per round, 3 rounds
    # 4 KiB: 12 KiB a call; the period (call + barrier) is those bytes at 12.5 B/us
    looped = ar.recursive_doubling(4096, 8, shaped).time_us
    assert looped == pytest.approx(3 * 4096 / 12.5 - barrier)
    assert 3 * step < looped < ar.recursive_doubling(4096, 8, f).time_us
    # 256 B: 768 B a call refill within the call; the loop is the rested call
    assert ar.recursive_doubling(256, 8, shaped).time_us == pytest.approx(3 * step)
    # 1 MiB: a call starts with the barrier's refill, not the whole bucket
    n = 1 << 20
    saved = ar.recursive_doubling(n, 8, f).time_us - ar.recursive_doubling(n, 8, shaped).time_us
    assert saved == pytest.approx(barrier + 3 * step)
    # no bucket (the shipped profiles): one call is the answer
    assert ar.ring(n, 8, f).time_us == pytest.approx(
        ar.ring(n, 8, f.with_(nic_burst_bytes=0.0)).time_us
    )


@settings(max_examples=20, deadline=None)
@example(n=2564, depth=5355.0)  # 4.5 B less a call, 64 calls down to its level
@given(st.integers(2048, 8192), st.floats(5000.0, 30000.0))
def test_the_loop_runs_until_the_buckets_level_stops_moving(n, depth):
    """A call that drains its NICs a little each time (a few KiB of recursive doubling)
    takes many calls to its steady state: the model is that state, a fixed point."""
    f = fab(1, nic_GBps=0.0125, nic_us=100.0).with_(nic_burst_bytes=depth)
    rank, steps, gap = np.arange(8), [(k, n, n) for k in range(3)], ar._barrier_us(f, 8)
    tokens, times = None, []
    for _ in range(2000):
        t, left, sent = ar._butterfly(f, rank, np.zeros(8), steps, fold=(n, n), tokens=tokens)
        times.append(float(t.max()))
        tokens = f.drain_bucket(left, t.max() - sent + gap, 0.0)[1]
    assert ar.recursive_doubling(n, 8, f).time_us == pytest.approx(times[-1], rel=1e-3)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 1 << 22), st.sampled_from([2, 4, 8]), st.floats(1000.0, 1e6))
def test_a_looped_call_is_between_the_rested_call_and_no_bucket(n, nodes, depth):
    f = fab(1, nic_GBps=0.0125, nic_us=100.0)
    shaped = f.with_(nic_burst_bytes=depth)
    rank = np.arange(nodes)
    steps = [(k, n, n) for k in range(nodes.bit_length() - 1)]
    rested = float(ar._butterfly(shaped, rank, np.zeros(nodes), steps, fold=(n, n))[0].max())
    for algo in (ar.recursive_doubling, ar.ring, ar.rabenseifner, ar.nvrar):
        looped = algo(n, nodes, shaped).time_us
        after_rest = algo(n, nodes, shaped, after_rest=True).time_us
        assert after_rest <= looped * (1 + 1e-9)
        assert looped <= algo(n, nodes, f).time_us * (1 + 1e-9)
        assert algo(n, nodes, f, after_rest=True).time_us == algo(n, nodes, f).time_us
        if algo is ar.recursive_doubling:
            assert looped >= rested * (1 - 1e-9)
            assert after_rest == pytest.approx(rested)
    name = ar.ompi_allreduce_algorithm(nodes, n)  # Open MPI's pick: ours but Rabenseifner's order
    if name != "rabenseifner":
        assert ar.predict("mpi", n, nodes, shaped, after_rest=True).time_us == pytest.approx(
            ar.predict(name, n, nodes, shaped, after_rest=True).time_us
        )


def test_nvrar_hierarchical_closed_form():
    n, g, nodes = 1 << 20, 4, 4
    f = fab(g)
    chunk = n / g
    rs = min(UP_US + us(3 * chunk, UP), 3 * (UP_US + us(chunk, UP)))
    inter = 2 * (NIC_US + us(4 * chunk, NIC))
    pred = ar.nvrar(n, nodes, f)
    assert pred.rank_finish_us == pytest.approx(np.full(g * nodes, 3 * STAGE + rs + inter + rs))
    assert pred.info["inter_steps"] == 2


def test_ring_closed_form():
    n, g, nodes = 1 << 20, 4, 2
    p = g * nodes
    f = fab(g, reduce_GBps=100.0)
    expect = 2 * (p - 1) * (STAGE + NIC_US + us(n / p, NIC)) + us(
        (p - 1) / p * n, 100.0
    )  # NVRAR paper: 2(p-1)α + 2((p-1)/p)nβ + ((p-1)/p)nγ, a grouped call per step
    assert ar.ring(n, nodes, f).time_us == pytest.approx(expect)


def test_a_ring_of_eager_messages_pays_each_link_in_turn():
    """Ranks chain their own steps: with every message eager, a delay moves around the
    ring (a path of 14 steps crosses 7 NICs and 7 links inside a node on 4 x 2); with
    messages that wait for their receiver every step pays the slowest link."""
    n, g, nodes = 64, 2, 4
    f = fab(g, nic_us=100.0)
    chunk, steps = n / 8, 14
    cross, inside = 100.0 + us(chunk, NIC), UP_US + us(chunk, UP)
    waits = ar.ring(n, nodes, f).time_us
    assert waits == pytest.approx(steps * (STAGE + cross))
    eager = f.with_(nic_eager_bytes=chunk, scaleup_eager_bytes=chunk)
    assert ar.ring(n, nodes, eager).time_us == pytest.approx(steps * STAGE + 7 * cross + 7 * inside)
    # above the limit the message waits again; one rank per node: every link alike
    assert ar.ring(2 * n, nodes, eager).time_us == pytest.approx(
        steps * (STAGE + 100.0 + us(2 * chunk, NIC))
    )
    one = fab(1, nic_us=100.0)
    assert ar.ring(n, 8, one.with_(nic_eager_bytes=1e6)).time_us == pytest.approx(
        ar.ring(n, 8, one).time_us
    )


def test_nccl_runs_small_calls_on_fewer_channels():
    # getAlgoInfo: drop channels while bytes < channels * threads * threshold
    # ring/LL on 16 ranks: threshold 8 * 16 bytes per thread, 512 threads
    assert nccl_table.channels_used(128 << 10, 16, 8, "ring", "LL") == 2 / 8
    assert nccl_table.channels_used(512 << 10, 16, 8, "ring", "LL") == 1.0
    # Simple: 64 bytes per thread; at 16 KiB one channel, then its threads halve to 256
    assert nccl_table.channels_used(16 << 10, 16, 8, "tree", "Simple") == pytest.approx(0.5 / 8)
    assert nccl_table.channels(4) == 8


def test_nccl_picks_its_fastest_estimate_and_pays_the_proxy_on_network_steps():
    f = fab(8, proxy_us=3.0)
    small, large = ar.nccl(1 << 12, 4, f), ar.nccl(1 << 30, 4, f)
    assert (small.info["algo"], small.info["proto"]) == ("tree", "LL")  # fewest hops
    assert (large.info["algo"], large.info["proto"]) == ("ring", "Simple")  # full bandwidth
    for size, pred in ((1 << 12, small), (1 << 30, large)):
        est = pred.info["estimates_us"]
        assert pred.info["nccl_estimate_us"] == min(est.values())
        hops = pred.info["network_steps"]
        assert hops == (4 if pred.info["algo"] == "tree" else 6)
        algo, proto = pred.info["algo"], pred.info["proto"]
        lat, bw = nccl_table.estimate_terms(size, 4, 8, min(8 * NIC, UP), algo, proto)
        share = pred.info["channel_share"]
        assert pred.time_us == pytest.approx(lat + bw / share + hops * (2 * 3.0 + NIC_US))
    assert large.info["channel_share"] == 1.0 and small.info["channel_share"] < 1.0
    # NCCL's table: tree/LL at 4 KiB on 4 nodes of 8: latency 4.4 + 2 (7 * 0.52 * 1.8 +
    # 2 * 5.0); bandwidth min(0.9 bus, 80) / 3.8 / 2, times the tree correction 0.7
    bw = min(0.9 * 8 * NIC, 80) / 3.8 / 2 * 0.7
    assert small.info["estimates_us"]["tree/LL"] == pytest.approx(
        4.4 + 2 * (7 * 0.52 * 1.8 + 2 * 5.0) + 4096 / (1000 * bw)
    )
    one_node = ar.nccl(1 << 20, 1, f)
    assert one_node.info["algo"] == "ring" and one_node.info["proxy_us"] == 0


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 1 << 26),
    nodes=st.integers(1, 40),
    g=st.sampled_from([1, 2, 4, 8]),
    algo=st.sampled_from(ar.ALGORITHMS),
)
def test_allreduce_never_beats_its_lower_bound(n, nodes, g, algo):
    pred = ar.predict(algo, n, nodes, fab(g))
    assert pred.rank_finish_us.shape == (nodes * g,)
    assert pred.time_us >= pred.lower_bound_us - 1e-9


def test_allreduce_bad_input():
    with pytest.raises(ValueError, match="no all-reduce model"):
        ar.predict("butterfly", 1024, 2, fab())
    with pytest.raises(ValueError, match="size"):
        ar.ring(-1, 2, fab())
    with pytest.raises(ValueError, match="node count"):
        ar.nvrar(1024, 0, fab())


def test_split_stages_keeps_every_byte_and_the_rail_rules():
    rng = np.random.default_rng(11)
    g, s = 2, 4
    p = g * s
    d = rng.integers(0, 50_000, (p, p))
    tr = schedule(d, g, balance="prologue").transfers()
    cut = a2a.split_stages(tr, 4000)
    assert list(cut.columns) == [c for c in tr.columns if c != "step"]
    for frame in (tr, cut):  # same bytes per phase and (origin, final)
        frame["phase"] = frame["phase"].astype(str)
    key = ["phase", "origin", "final"]
    before = tr.groupby(key).nbytes.sum()
    after = cut.groupby(key).nbytes.sum()
    assert before.equals(after)
    rail = cut[cut.phase == "stage"]
    assert (rail.src % g == rail.dst % g).all()
    senders = rail.assign(s=rail.src // g, t=rail.dst // g).groupby(["stage", "t"]).s.nunique()
    assert (senders <= 1).all()
    assert rail.groupby(["stage", "src"]).nbytes.sum().max() <= 4000
    assert cut.stage.max() >= tr.stage.max()
    f = fab(g)
    for bal in a2a.BALANCE_MODES:
        pred = a2a.fast(d, cut, f, balance=bal)
        assert pred.time_us >= pred.lower_bound_us
    same = a2a.split_stages(tr, 1 << 40)
    assert a2a.fast(d, same, f).time_us == pytest.approx(a2a.fast(d, tr, f).time_us)
    with pytest.raises(ValueError, match="max_stage_bytes"):
        a2a.split_stages(tr, 0)


def test_fast_follows_the_plan_steps():
    """The model runs a schedule's rows in its plans' steps (``step`` column): for a
    prologue schedule they are the derived steps, for a pipelined one the lend-ahead
    what-if's."""
    rng = np.random.default_rng(5)
    g, s = 4, 4
    d = rng.integers(0, 1 << 20, (g * s, g * s))
    d[1, 9] = 1 << 26  # one hot pair: much lending
    f = fab(g)
    pro = schedule(d, g, balance="prologue", max_stage_bytes=1 << 21).transfers()
    pipe = schedule(d, g, balance="pipelined", max_stage_bytes=1 << 21).transfers()
    planned_pro = a2a.fast(d, pro, f)
    planned_pipe = a2a.fast(d, pipe, f)
    assert planned_pro.info["balance"] == "plan" == planned_pipe.info["balance"]
    assert planned_pro.time_us == pytest.approx(a2a.fast(d, pro, f, balance="prologue").time_us)
    what_if = a2a.fast(d, pro, f, balance="pipelined")
    assert planned_pipe.time_us == pytest.approx(what_if.time_us)
    assert planned_pipe.time_us < planned_pro.time_us
    assert planned_pipe.info["prologue_us"] < planned_pro.info["prologue_us"]


# ---------------------------------------------------------------- tuning


@settings(max_examples=8, deadline=None)
@given(s=st.integers(2, 5), seed=st.integers(0, 2**16), hot=st.booleans())
def test_tuner_returns_the_minimum_and_never_loses_to_the_default(s, seed, hot):
    from commbench.kernels.model.tune import MAX_PASSES, candidate_options, descent_axes, tune_fast

    g = 4
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 1 << 20, (g * s, g * s))
    if hot:
        d[1, g * s - 1] = 1 << 25
    f = fab(g)
    t = tune_fast(d, g, f)
    cands = candidate_options(f)
    assert len(t.candidates) >= len(cands) > 1
    assert [c["options"] for c in t.candidates[: len(cands)]] == cands
    assert cands[0] == {"stage_cost_bytes": f.stage_cost_bytes}  # the default comes first
    axes = descent_axes(f)
    defaults = {"tail": "last", "first_stage_fraction": None}

    def along(opts: dict, keys: tuple, combo: tuple) -> dict:
        out = {k: v for k, v in opts.items() if k not in keys}
        out.update((k, v) for k, v in zip(keys, combo, strict=True) if defaults.get(k, k) != v)
        return out

    def key(opts: dict) -> str:
        return repr(sorted(opts.items(), key=lambda kv: kv[0]))

    seen = [key(c["options"]) for c in t.candidates]
    assert len(set(seen)) == len(seen)  # nothing evaluated twice
    # the descent: every later set is one axis move away from a set evaluated before it
    for i, row in enumerate(t.candidates[len(cands) :], start=len(cands)):
        earlier = [c["options"] for c in t.candidates[:i]]
        assert any(
            key(along(prev, keys, combo)) == key(row["options"])
            for prev in earlier
            for keys, combos in axes
            for combo in combos
        ), row["options"]
    times = [c["time_us"] for c in t.candidates]
    assert t.prediction.time_us == min(times)
    assert t.options == t.candidates[times.index(min(times))]["options"]
    # it stopped at a set no move along any axis improves (or after MAX_PASSES passes)
    best_row = t.candidates[times.index(min(times))]
    moves = [
        key(along(t.options, keys, combo))
        for keys, combos in axes
        for combo in combos
        if best_row["tail_bytes"]
        or "tail" not in keys
        or combo[keys.index("tail")] in (t.options.get("tail", "last"),)
    ]
    assert 1 <= t.passes <= MAX_PASSES
    assert t.passes == MAX_PASSES or set(moves) <= set(seen)
    default = commbench.kernels.fast.schedule(d, g, stage_cost_bytes=f.stage_cost_bytes)
    assert t.default_time_us == pytest.approx(a2a.fast(d, default.transfers(), f).time_us)
    assert t.prediction.time_us <= t.default_time_us
    again = commbench.kernels.fast.schedule(d, g, **t.options)
    assert a2a.fast(d, again.transfers(), f).time_us == pytest.approx(t.prediction.time_us)


def test_tuner_meets_the_10us_target_with_the_early_tail_and_the_split_first_stage():
    """320 GPUs, zipf:0.8, 256 MiB per GPU, 10 µs per stage (issue 6's target point):
    the tail posted with a split first stage hides that stage's lending; the tuner's
    earlier fixed rounds (tail, then split on the 3 fastest) never tried that pair with a
    large enough stage cap and stopped at 1.102."""
    from commbench.harness.workloads import generate
    from commbench.kernels.model.tune import tune_fast
    from commbench.model.simulate import fabric_from_profile

    f = fabric_from_profile("h200", stage_us=10.0)
    d = generate("zipf:0.8", 320, 256 << 20, seed=1)
    t = tune_fast(d, 8, f)
    assert t.options.get("tail") == "early" and t.options.get("first_stage_fraction")
    assert t.prediction.time_over_lb <= 1.10


def test_tuner_never_varies_fixed_options_and_checks_its_input():
    from commbench.kernels.model.tune import (
        TAIL_PENALTIES,
        candidate_options,
        descent_axes,
        tune_fast,
    )

    f = fab(4)
    fixed = {"max_stage_bytes": 1 << 20, "balance": "prologue"}
    cands = candidate_options(f, fixed)
    assert all(c["max_stage_bytes"] == 1 << 20 and c["balance"] == "prologue" for c in cands)
    assert len({tuple(sorted(c.items())) for c in cands}) == len(cands)  # no duplicates
    assert candidate_options(fab(4, stage_us=0.0, nic_us=0.0))[1:] == [
        {"stage_cost_bytes": 0, "max_stage_bytes": None, "tail_penalty": p, "quantum": "auto"}
        for p in TAIL_PENALTIES
    ]  # no per-stage cost: nothing to scale a stage cap by
    axes = dict(descent_axes(f, {"tail": 2, "max_stage_bytes": None}))
    assert list(axes) == [("first_stage_fraction",), ("tail_penalty",)]
    d = np.random.default_rng(3).integers(0, 1 << 20, (16, 16))
    t = tune_fast(d, 4, f, fixed=fixed)
    assert t.passes >= 1 and len(t.candidates) > len(cands)
    assert all(
        c["options"]["max_stage_bytes"] == 1 << 20 and c["options"]["balance"] == "prologue"
        for c in t.candidates
    )
    d = np.full((8, 8), 1 << 16)
    with pytest.raises(ValueError, match="gpus_per_node"):
        tune_fast(d, 2, f)
    with pytest.raises(ValueError, match="candidate"):
        tune_fast(d, 4, f, candidates=[])
