"""The flow-level model of permutation steps (kernels/model/flows.py)."""

from __future__ import annotations

import math
import signal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.kernels.model import Fabric, flows
from commbench.kernels.model import alltoallv as a2a_model
from commbench.kernels.model.fabric import fair_rates, step_finish
from commbench.kernels.model.flows import (
    expected_joins,
    join_events,
    one_loss_median,
    permutation_steps,
    step_ends,
)

ALPHA = 100.0
RATE = 0.0125  # GB/s: 12.5 bytes per us


def fabric(**kw) -> Fabric:
    base = dict(gpus_per_node=1, nic_GBps=RATE, nic_us=ALPHA, scaleup_GBps=1.0, scaleup_us=5.0)
    return Fabric(**{**base, **kw})


def test_a_released_senders_next_flow_waits_behind_its_last():
    """Rank 0 sends M to rank 1, then M to rank 2 (one rank per node), eager 0. Its
    first flow's window opens from ``queue`` by every byte sent, so the sender is
    released once what is left, falling as the window grows, fits it; its next flow
    starts a latency later and waits until the first has ended (first in, first out)."""
    m, queue = 100_000.0, 30_000.0
    dst = np.array([[1, 2, 0], [2, 0, 1]])
    nb = np.array([[m, 0, 0], [m, 0, 0]])
    fab = fabric(nic_send_buffer_bytes=2 * m, nic_queue_bytes=queue)
    finish = permutation_steps(fab, dst, nb)
    r = RATE * 1e3
    opened = (m - queue) / (2 * r)  # from a flow's start until what is left fits
    first_end = ALPHA + m / r
    assert finish[1] == pytest.approx(first_end)  # never slowed by the second
    assert finish[2] == pytest.approx(first_end + m / r)
    assert finish[0] == pytest.approx(first_end + opened)
    # alone, the sender leaves once the window has opened, well after the match
    alone = permutation_steps(fab, dst[:1], nb[:1])
    assert alone[0] == pytest.approx(ALPHA + opened) and alone[0] > 2 * ALPHA
    # no queue measured: the window is the whole buffer, released at the match
    whole = permutation_steps(fabric(nic_send_buffer_bytes=2 * m), dst, nb)
    assert whole[1] == pytest.approx(first_end)
    assert whole[0] == pytest.approx(first_end + ALPHA)
    # the window stops at the buffer: what is left must fall to it
    capped = permutation_steps(fab.with_(nic_send_buffer_bytes=50_000.0), dst, nb)
    assert capped[0] == pytest.approx(first_end + (m - 50_000.0) / r)
    # held until its flows end (no buffer): one after the other
    held = permutation_steps(fabric(nic_send_buffer_bytes=0.0), dst, nb)
    assert held[1] == pytest.approx(ALPHA + m / r)
    assert held[0] == held[2] == pytest.approx(held[1] + ALPHA + m / r)


def test_step_ends_are_each_ranks_steps_in_order_the_last_its_finish():
    p, m = 4, 50_000.0
    fab = fabric(nic_send_buffer_bytes=2 * m, nic_queue_bytes=m / 4, msg_us=3.0)
    nb = np.full((p - 1, p), m)
    nb[1, 2] = 4 * m  # one heavy flow
    ends = step_ends(fab, _shifts(p), nb)
    assert ends.shape == (p - 1, p) and (np.diff(ends, axis=0) >= 0).all()
    assert ends[-1] == pytest.approx(permutation_steps(fab, _shifts(p), nb))
    assert step_ends(fab, np.zeros((0, p), dtype=int), np.zeros((0, p))).shape == (0, p)


def test_a_sender_waits_until_what_is_left_fits_its_buffer():
    m, buf = 100_000.0, 25_000.0
    dst = np.array([[1, 0]])
    nb = np.array([[m, 0]])
    finish = permutation_steps(fabric(nic_send_buffer_bytes=buf), dst, nb)
    r = RATE * 1e3
    assert finish[0] == pytest.approx(ALPHA + (m - buf) / r)
    assert finish[1] == pytest.approx(ALPHA + m / r)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from([1, 2, 4]),  # ranks per node
    st.integers(2, 4),  # nodes
    st.integers(1, 1 << 20),  # bytes per pair
    st.floats(0.0, 50.0),  # msg_us
)
def test_without_a_buffer_uniform_spreadout_is_the_step_model(g, nodes, nbytes, msg):
    """Senders held to their flow's end, uniform traffic: the flow-level run of the
    steps ends every rank where chaining the steps does."""
    p = g * nodes
    fab = fabric(gpus_per_node=g, msg_us=msg, stage_us=7.0, fabric_GBps=RATE * p * 0.6)
    d = np.full((p, p), nbytes, dtype=np.int64)
    ranks = np.arange(p)
    shifts = (ranks[None, :] + np.arange(1, p)[:, None]) % p
    flows = permutation_steps(fab, shifts, d[ranks[None, :], shifts])
    ready = np.zeros(p)
    for dst in shifts:
        ready = step_finish(fab, ready, ranks, dst, d[ranks, dst])
    assert flows == pytest.approx(ready, rel=1e-9)
    # with a buffer spread-out runs flow by flow, and says so
    pred = a2a_model.spreadout(d, fab.with_(nic_send_buffer_bytes=1.0))
    assert pred.info["flow_level"] and not a2a_model.spreadout(d, fab).info["flow_level"]


def _shifts(p: int) -> np.ndarray:
    ranks = np.arange(p)
    return (ranks[None, :] + np.arange(1, p)[:, None]) % p


TIMEOUT = 200e3


def test_a_lossy_uniform_spreadout_pays_its_one_timeout_on_the_critical_path():
    """Every flow of a uniform spread-out is on the critical path: wherever its loss
    falls, the call ends about one timeout later; without a timeout nothing changes."""
    p, m = 4, 50_000
    fab = fabric(nic_send_buffer_bytes=8_000.0)
    nb = np.full((p - 1, p), float(m))
    base = permutation_steps(fab, _shifts(p), nb)
    same, runs = one_loss_median(fab, _shifts(p), nb)
    assert runs == 0 and same == pytest.approx(base)
    finish, runs = one_loss_median(fab.with_(loss_timeout_us=TIMEOUT), _shifts(p), nb)
    assert runs == p * (p - 1)  # every flow crosses nodes (one rank a node)
    assert base.max() + 0.9 * TIMEOUT <= finish.max() <= base.max() + 1.05 * TIMEOUT


def test_a_loss_on_a_flow_with_slack_hides_behind_the_heavy_one():
    """One heavy flow (rank 0 -> 1 in the first step, far longer than a timeout) sets
    the call; ranks 2 and 3 exchange a little (2 -> 3 first, 3 -> 2 last). A loss on
    either light flow ends long before the heavy one: the median of the three runs is
    the lossless call. A loss on a flow a later step waits for would show: a flow is
    hidden only where its ranks have slack."""
    p = 4
    shifts = _shifts(p)
    nb = np.zeros((p - 1, p))
    nb[0, 0] = RATE * 1e3 * 10 * TIMEOUT  # 0 -> 1: ten timeouts at the NIC's rate
    nb[0, 2] = nb[2, 3] = 1_000.0  # 2 -> 3, 3 -> 2
    fab = fabric(nic_send_buffer_bytes=8_000.0, loss_timeout_us=TIMEOUT)
    base = permutation_steps(fab, shifts, nb)
    finish, runs = one_loss_median(fab, shifts, nb)
    assert runs == 3 and finish.max() == pytest.approx(base.max(), rel=1e-9)
    late = np.zeros(nb.shape)
    late[0, 0] = TIMEOUT  # the heavy flow itself: the whole timeout shows
    assert permutation_steps(fab, shifts, nb, late).max() >= base.max() + 0.99 * TIMEOUT


def _lossy(chances: dict[int, float], calls: int = 1) -> Fabric:
    """A lossy fabric whose port of two senders pays a timeout with ``chances[bytes]``."""
    late = tuple((2, c, b) for b, c in sorted(chances.items()))
    return fabric(nic_send_buffer_bytes=8_000.0, loss_timeout_us=TIMEOUT, loss_late=late,
                  calls_averaged=calls)  # fmt: skip


def test_a_join_reads_the_two_senders_chance_at_both_flows_bytes():
    """Every receiver of a uniform spread-out (one rank a node) takes a flow in each of
    its 3 steps: steps 1 and 2 join a port still taking the step before's, each read at
    k = 2 and the two flows' bytes (log-interpolated between the measured sizes)."""
    p, m = 4, 50_000
    fab = _lossy({50_000: 0.01, 200_000: 0.09})
    events = join_events(fab, _shifts(p), np.full((p - 1, p), float(m)))
    assert len(events) == p * (p - 2)
    assert {k for k, _, _ in events} == {1, 2}
    assert all(c == pytest.approx(0.05) for *_, c in events)  # 100 KB: halfway on a log axis
    nb = np.full((p - 1, p), float(m))
    nb[:, 0] = 0.0  # rank 0 sends nothing: no join before or after its flows' places
    events = join_events(fab, _shifts(p), nb)
    assert sorted((k, s) for k, s, _ in events) == [(1, 1), (1, 2), (2, 1), (2, 2)]


@settings(max_examples=15, deadline=None)
@given(chance=st.floats(0.0, 0.5), calls=st.integers(1, 5))
def test_joins_cost_their_chance_of_a_timeout_each(chance, calls):
    """The expected slowest rank lies between the lossless call plus the largest rank's
    expected extra (the slowest is never faster than a rank's mean) and the call with
    every join paid; no chance, no cost."""
    p, m = 4, 50_000.0
    nb = np.full((p - 1, p), m)
    fab = _lossy({1: chance}, calls)
    base = permutation_steps(fab, _shifts(p), nb)
    finish, runs = expected_joins(fab, _shifts(p), nb)
    assert runs == (p * (p - 2) if chance > 0 else 0)
    every = base.max() + runs * TIMEOUT
    expected_extra = chance * TIMEOUT * 0.9  # a join on the critical path adds ~one timeout
    assert base.max() + expected_extra <= finish.max() + 1e-6
    assert finish.max() <= every + 1e-6
    if chance == 0:
        assert finish == pytest.approx(base)


def test_joins_drawn_over_more_calls_cost_less_than_one_call():
    """The slowest rank's mean over m calls: a rank unlucky in one call is less likely to be
    unlucky in most of five, so the reading's expected cost falls toward the mean."""
    p, nb = 4, np.full((3, 4), 50_000.0)
    one = expected_joins(_lossy({1: 0.05}, 1), _shifts(p), nb)[0].max()
    five = expected_joins(_lossy({1: 0.05}, 5), _shifts(p), nb)[0].max()
    base = permutation_steps(_lossy({1: 0.05}), _shifts(p), nb).max()
    assert base < five < one


def test_joins_are_capped_evenly_and_drawn_in_chunks(monkeypatch):
    """Past ``LOSS_POSITIONS`` joins, evenly spaced ones stand for the rest (their chance
    scaled by the share); the draws go in chunks, with the same result."""
    p, nb = 4, np.full((3, 4), 50_000.0)
    whole = expected_joins(_lossy({1: 0.05}, 5), _shifts(p), nb)[0]
    monkeypatch.setattr(flows, "_DRAW_CELLS", 7)
    assert expected_joins(_lossy({1: 0.05}, 5), _shifts(p), nb)[0] == pytest.approx(whole)
    monkeypatch.setattr(flows, "LOSS_POSITIONS", 4)
    finish, runs = expected_joins(_lossy({1: 0.05}, 5), _shifts(p), nb)
    assert runs == 4 and finish.max() > permutation_steps(_lossy({1: 0.05}), _shifts(p), nb).max()


def test_spreadout_takes_the_joins_where_a_chance_is_measured():
    traffic = np.full((4, 4), 50_000, dtype=np.int64)
    pred = a2a_model.spreadout(traffic, _lossy({1: 0.05}))
    assert pred.info["loss_positions"] == 8  # the joins, not every flow (12)
    plain = a2a_model.spreadout(traffic, _lossy({1: 0.05}).with_(loss_late=()))
    assert plain.info["loss_positions"] == 12


def test_loss_positions_are_capped_evenly(monkeypatch):
    monkeypatch.setattr(flows, "LOSS_POSITIONS", 5)
    fab = fabric(nic_send_buffer_bytes=8_000.0, loss_timeout_us=TIMEOUT)
    _, runs = one_loss_median(fab, _shifts(4), np.full((3, 4), 1_000.0))
    assert runs == 5
    pred = a2a_model.spreadout(np.full((4, 4), 1_000, dtype=np.int64), fab)
    assert pred.info["loss_positions"] == 5


def test_bad_schedules_are_refused():
    with pytest.raises(ValueError, match="not a permutation"):
        permutation_steps(fabric(), np.array([[1, 1]]), np.array([[1, 1]]))
    with pytest.raises(ValueError, match="one shape"):
        permutation_steps(fabric(), np.array([[1, 0]]), np.array([[1, 1, 1]]))
    with pytest.raises(ValueError, match="delay_us"):
        permutation_steps(fabric(), np.array([[1, 0]]), np.array([[1, 1]]), np.array([[-1, 0]]))
    with pytest.raises(ValueError, match="nic_queue_bytes"):
        fabric(nic_queue_bytes=-1.0)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fair_rates_fill_every_flow_to_a_full_constraint(data):
    """Max-min fairness: no constraint is over its cap, and every flow sits in a full
    constraint where no other flow has a higher rate."""
    n = data.draw(st.integers(1, 6))
    k = data.draw(st.integers(1, 5))
    members = [
        np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))) for _ in range(k)
    ]
    caps = np.array(data.draw(st.lists(st.floats(0.5, 10.0), min_size=k, max_size=k)))
    rate = fair_rates(caps, members, n)
    covered = set().union(*(set(m.tolist()) for m in members))
    for i in range(n):
        if i not in covered:
            assert math.isinf(rate[i])
    for cap, m in zip(caps, members, strict=True):
        assert rate[m].sum() <= cap * (1 + 1e-9)
    for i in covered:
        assert any(
            rate[m].sum() >= cap * (1 - 1e-9) and rate[i] >= rate[m].max() * (1 - 1e-9)
            for cap, m in zip(caps, members, strict=True)
            if i in m
        )


def test_a_timeout_of_seconds_does_not_stall_the_clock():
    """A 2x4 uniform spread-out at 1 MiB a rank on the constants of one emulated shallow
    calibration, one flow 31.4 s late (the timeout that calibration read: a connection's
    SYN retried five times): there an in-node flow's last rounding's worth of bytes ends
    closer than the float clock's resolution, which once kept the model from ending."""

    def stalled(*_):
        raise TimeoutError("the flow model did not end in 30 s")

    fab = Fabric(gpus_per_node=4, nic_GBps=0.012007, nic_us=66.809, scaleup_GBps=2.5035,
                 scaleup_us=22.34, msg_us=1.3701, nic_eager_bytes=32768.0,
                 nic_send_buffer_bytes=1025000.0, nic_queue_bytes=270860.0)  # fmt: skip
    dst, nb = a2a_model.spreadout_steps(np.full((8, 8), 131072))
    delay = np.zeros(dst.shape)
    delay[1, 3] = 31.416e6
    previous = signal.signal(signal.SIGALRM, stalled)
    signal.alarm(30)
    try:
        finish = permutation_steps(fab, dst, nb, delay)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert 31.416e6 < finish.max() < 31.416e6 + 1e6
