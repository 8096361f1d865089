"""Flow-level model of permutation steps whose senders leave before their bytes arrive.

:func:`~commbench.kernels.model.fabric.step_finish` holds a sender in its step until its
flow ends. A host MPI's send over TCP returns earlier: once the receiver has matched it
(the first fragment there and its acknowledgement back) and the rest fits in what the
kernel holds for the flow (socket and NIC queue). The sender then starts its next step
while its NIC still carries the rest of the last message, and its next flow waits behind
that rest. Steps chained per rank cannot express that; this module runs the flows in
time instead (a fluid model: between events every flow moves at its max-min fair share
of the ports it crosses).

A schedule here is ``P - 1`` (or any number of) permutation steps, as spread-out and
Open MPI's pairwise all-to-allv run them: at step k rank r sends ``nbytes[k][r]`` to
``dst[k][r]`` and receives from the rank whose ``dst`` is r. A rank posts step k when it
has left step k - 1 (``stage_us`` plus ``msg_us`` per message later); a flow starts one
latency after both of its ranks have posted (a rendezvous); a rank leaves the step when
its receive has ended and its send is released: a flow inside a node at its end, one
between nodes once its first ``nic_eager_bytes`` (the fragment the receiver matches)
have crossed and been acknowledged (one latency) and what is left fits its window. The
window opens as the flow is acknowledged, as TCP's does: ``nic_queue_bytes`` once the
first fragment is through, and every byte sent after it, up to ``nic_send_buffer_bytes``
(a fabric without the queue measured: the whole buffer from the start). A NIC sends its
flows first in, first out: a flow between nodes that starts while its sender's older
flows still send waits until they have ended. Rates (max-min fair): each NIC and each
scale-up port serves its flows (each direction on its own) at its rate, a flow between
nodes is capped by ``exchange_GBps`` while its reverse flows too, one inside a node by
``scaleup_peer_GBps``, and all flows between nodes together by the fabric cap
(:meth:`Fabric.cap_GBps` at the flows each sending NIC carries and their bytes). Incast
does not arise: a rank receives one flow at a time.

Measured on the emulated cluster (docs/model-validation-history.md, "A NIC sends its flows in
turn"): in a spread-out on the skewed trace the flows into the busiest receivers ran at
the NIC's full rate while their senders' next flows waited, and a sender left its first
step 20-44 ms into a 400-800 KiB flow; the 4 MiB ``release`` point of ``commbench
calibrate`` gives the buffer and its ``overlap`` point the queue.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from commbench.kernels.model.fabric import Fabric, fair_rates

_BYTES_PER_US = 1e3
#: a flow this close to its end (bytes) has ended: the float sums of a fluid model
_EPS_BYTES = 1e-6
#: the least step of the clock (µs): at a call's time plus a timeout of seconds an event
#: a rounding's worth of bytes away is closer than the float's resolution and would not
#: move it; a picosecond does, up to 1000 s of modelled time
_MIN_STEP_US = 1e-6


def permutation_steps(
    fabric: Fabric, dst: np.ndarray, nbytes: np.ndarray, delay_us: np.ndarray | None = None
) -> np.ndarray:
    """Per-rank finish times (µs) of the permutation steps ``dst[k][r]`` /
    ``nbytes[k][r]`` (K x P arrays; see the module docstring), every rank starting at 0:
    the last row of :func:`step_ends`."""
    ends = step_ends(fabric, dst, nbytes, delay_us)
    return ends[-1] if len(ends) else np.zeros(np.shape(dst)[1])


def step_ends(
    fabric: Fabric, dst: np.ndarray, nbytes: np.ndarray, delay_us: np.ndarray | None = None
) -> np.ndarray:
    """When each rank leaves each of the permutation steps ``dst[k][r]`` /
    ``nbytes[k][r]`` (K x P, µs; see the module docstring), every rank starting at 0.
    Zero-byte and self flows cost nothing and post no message. ``delay_us[k][r]``: how
    much later than its rendezvous the flow of rank r in step k starts (a lost first
    burst waiting for its retransmission; default none)."""
    dst = np.asarray(dst, dtype=np.int64)
    nb = np.asarray(nbytes, dtype=np.float64)
    if dst.ndim != 2 or dst.shape != nb.shape:
        raise ValueError(
            f"dst and nbytes must be K x P arrays of one shape ({dst.shape}, {nb.shape})"
        )
    nsteps, p = dst.shape
    for k in range(nsteps):
        if not np.array_equal(np.sort(dst[k]), np.arange(p)):
            raise ValueError(f"step {k}: dst is not a permutation of the {p} ranks")
    src = np.argsort(dst, axis=1)  # src[k][r]: who sends to r in step k
    real = (nb > 0) & (dst != np.arange(p))
    posts = real.astype(np.int64) + np.take_along_axis(real, src, axis=1)
    overhead = fabric.stage_us + fabric.msg_us * posts  # per step and rank
    delay = np.zeros(dst.shape) if delay_us is None else np.asarray(delay_us, dtype=np.float64)
    if delay.shape != dst.shape or not (delay >= 0).all():
        raise ValueError(f"delay_us must be a K x P array of times >= 0 (got shape {delay.shape})")
    if not nsteps:
        return np.zeros((0, p))
    sim = _Run(fabric, dst, nb, src, real, overhead, delay)
    return sim.run()


#: the most loss positions :func:`one_loss_median` and :func:`expected_joins` run
#: (evenly spaced beyond it): the model's cost stays bounded at large P
LOSS_POSITIONS = 64


def one_loss_median(fabric: Fabric, dst: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, int]:
    """Permutation steps on a lossy fabric: ``(each rank's finish, positions run)`` in the
    median call over where the call's one loss falls.

    A host-driven rank starts its next step when its own previous one has ended, so the
    ranks drift apart, and a sender that starts early sends into a receiver still taking
    the step before from another: two senders into one port, which may cost a
    retransmission timeout (:func:`~commbench.kernels.model.fabric.late_chance`). The
    model charges a call one. Which flow loses is chance: every flow between nodes in turn starts
    ``loss_timeout_us`` late (:func:`permutation_steps`), and the call is the run of
    median time (the harness reports medians of calls). A flow whose ranks have slack,
    waiting for a heavier flow anyway, hides its timeout; in a uniform call every flow
    is on the critical path."""
    dst = np.asarray(dst, dtype=np.int64)
    nb = np.asarray(nbytes, dtype=np.float64)
    g = fabric.gpus_per_node
    cross = (nb > 0) & (np.arange(dst.shape[1])[None, :] // g != dst // g)
    where = np.argwhere(cross)
    if fabric.loss_timeout_us <= 0 or not len(where):
        return permutation_steps(fabric, dst, nb), 0
    if len(where) > LOSS_POSITIONS:
        where = where[np.linspace(0, len(where) - 1, LOSS_POSITIONS).round().astype(int)]
    runs = []
    for k, r in where:
        delay = np.zeros(dst.shape)
        delay[k, r] = fabric.loss_timeout_us
        runs.append(permutation_steps(fabric, dst, nb, delay))
    order = np.argsort([run.max() for run in runs], kind="stable")
    return runs[int(order[len(runs) // 2])], len(where)


#: draws of a call's joins :func:`expected_joins` averages over (seeded: the model
#: gives one number; its draw-to-draw error is under 1 % of a timeout's cost)
JOIN_DRAWS = 4000
#: the most (draw, call, join) cells :func:`expected_joins` holds at once
_DRAW_CELLS = 1 << 21


def join_events(
    fabric: Fabric, dst: np.ndarray, nbytes: np.ndarray
) -> list[tuple[int, int, float]]:
    """``[(step, sender, chance), ...]``: the flows between nodes that join a port still
    taking the step before's flow, and their chance of a retransmission timeout. A rank
    that starts its next step while its receiver still takes the last one from another
    sender makes that port take two senders for a while: for each receiver and step
    k >= 1 whose flows in at k and k - 1 both cross nodes, the chance that a port taking
    two senders, both flows' bytes in all, pays one (:meth:`Fabric.loss_chance`, the
    ``flows`` points' curve at k = 2), charged to step k's flow."""
    dst = np.asarray(dst, dtype=np.int64)
    nb = np.asarray(nbytes, dtype=np.float64)
    g = fabric.gpus_per_node
    src = np.argsort(dst, axis=1)  # src[k][r]: who sends to r in step k
    size_in = np.take_along_axis(nb, src, axis=1)
    cross_in = (size_in > 0) & (src // g != np.arange(dst.shape[1])[None, :] // g)
    events = []
    for k, r in np.argwhere(cross_in[1:] & cross_in[:-1]):
        chance = float(fabric.loss_chance(2, size_in[k, r] + size_in[k + 1, r]))
        events.append((int(k) + 1, int(src[k + 1, r]), chance))
    return events


def expected_joins(fabric: Fabric, dst: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, int]:
    """Permutation steps on a lossy fabric with measured chances (``loss_late``): ``(each
    rank's finish, join positions run)``, the slowest rank's expected time over the
    calls a reading averages (``calls_averaged``). Each of the :func:`join_events`
    pays a timeout with its chance, independently: what one there adds to each rank
    (that flow starting ``loss_timeout_us`` late, :func:`permutation_steps`; nothing
    where its ranks have slack) is run once, the timeouts of a call add, and the
    expected largest mean over the calls is averaged over :data:`JOIN_DRAWS` seeded
    draws of which joins pay. On the emulated 2x4 shallow queue a uniform call has 24
    joins, whose k = 2 chance (0.02-0.03 at 1 MiB a rank, ~0.07 at 8 MiB) gives the
    0.55-0.64 and 1.73 timeouts a call the nodes' TCP counters read. At most
    :data:`LOSS_POSITIONS` joins are run (evenly spaced, each standing for its share of
    the rest)."""
    dst = np.asarray(dst, dtype=np.int64)
    nb = np.asarray(nbytes, dtype=np.float64)
    base = permutation_steps(fabric, dst, nb)
    events = join_events(fabric, dst, nb) if fabric.loss_timeout_us > 0 else []
    events = [e for e in events if e[2] > 0]
    if not events:
        return base, 0
    picked = events
    if len(events) > LOSS_POSITIONS:
        picked = [events[i] for i in np.linspace(0, len(events) - 1, LOSS_POSITIONS).round().astype(int)]  # fmt: skip
    share = len(events) / len(picked)
    added = np.empty((len(picked), base.size))  # join x rank: what its timeout adds
    chance = np.empty(len(picked))
    for j, (k, r, c) in enumerate(picked):
        delay = np.zeros(dst.shape)
        delay[k, r] = fabric.loss_timeout_us
        added[j] = np.maximum(permutation_steps(fabric, dst, nb, delay) - base, 0.0)
        chance[j] = min(c * share, 1.0)
    rng = np.random.default_rng(0)
    calls = fabric.calls_averaged
    per_chunk = max(1, _DRAW_CELLS // (calls * len(picked)))  # bounded memory at any -n
    total = 0.0
    for start in range(0, JOIN_DRAWS, per_chunk):
        n = min(per_chunk, JOIN_DRAWS - start)
        paid = rng.random((n, calls, len(picked))) < chance  # draw x call x join
        mean_over_calls = base + (paid.astype(np.float64) @ added).mean(axis=1)  # draw x rank
        total += float(mean_over_calls.max(axis=1).sum())
    slowest = total / JOIN_DRAWS
    finish = base + chance @ added  # each rank's expected time
    hit = added.any(axis=0)  # the ranks a timeout can reach shift alike to the slowest's
    finish[hit] += max(slowest - float(finish.max()), 0.0)
    return finish, len(picked)


class _Run:
    """One simulation of :func:`permutation_steps` (its state and events)."""

    def __init__(self, fabric: Fabric, dst, nb, src, real, overhead, delay) -> None:
        self.fabric, self.dst, self.nb, self.src, self.real = fabric, dst, nb, src, real
        self.overhead, self.delay = overhead, delay
        self.nsteps, p = dst.shape
        self.step = np.zeros(p, dtype=np.int64)
        self.posted = np.zeros(p, dtype=bool)  # has posted its current step
        self.send_open = np.zeros(p, dtype=bool)
        self.recv_open = np.zeros(p, dtype=bool)
        self.ends = np.zeros(dst.shape)
        self.flows: dict[tuple[int, int], dict] = {}  # (sender, step) -> its flow
        self.posts = [(float(overhead[0, r]), r) for r in range(p)]  # (time, rank) heap
        heapq.heapify(self.posts)
        self.now = 0.0

    def run(self) -> np.ndarray:
        fabric = self.fabric
        while self.posts or self.flows:
            now = self.now
            started = [key for key, f in self.flows.items() if f["start"] <= now]
            keys = [key for key in started if not self._older(key)]
            for key in keys:  # the first fragment through: matched, acknowledged later
                f = self.flows[key]
                if math.isinf(f["matched"]) and f["size"] - f["left"] >= f["eager"] - _EPS_BYTES:
                    f["matched"] = now + (fabric.nic_us if f["cross"] else 0.0)
            rates = _rates(fabric, [self.flows[key] for key in keys])
            starts = [f["start"] for f in self.flows.values() if f["start"] > now]
            horizon = min([t for t, _ in self.posts[:1]] + starts, default=math.inf)
            for key, rate in zip(keys, rates, strict=True):
                horizon = min(horizon, now + self._next_change(key, rate))
            if not math.isfinite(horizon):
                raise RuntimeError("flow model stalled: a step waits for a flow that never starts")
            horizon = max(horizon, now + _MIN_STEP_US)  # an event too close to move a float clock
            for key, rate in zip(keys, rates, strict=True):
                f = self.flows[key]
                f["left"] = 0.0 if math.isinf(rate) else f["left"] - rate * (horizon - now)
            self.now = horizon
            while self.posts and self.posts[0][0] <= horizon:
                self._post(heapq.heappop(self.posts)[1])
            for (s, k), f in list(self.flows.items()):
                if f["start"] <= horizon:
                    self._settle(s, k, f)
        return self.ends

    def _older(self, key) -> list:
        """The flows between nodes leaving the same NIC as ``key`` from earlier steps (it
        waits for them: first in, first out)."""
        f = self.flows[key]
        return [k for k, g in self.flows.items()
                if g["src"] == f["src"] and g["cross"] and g["step"] < f["step"]]  # fmt: skip

    def _window(self, f: dict) -> float:
        """The bytes of a flow between nodes its sender's kernel may hold: the sender is
        released once what is left fits (see the module docstring)."""
        buffer, queue = self.fabric.nic_send_buffer_bytes, self.fabric.nic_queue_bytes
        if queue <= 0:
            return buffer
        return min(buffer, queue + max(f["size"] - f["left"] - f["eager"], 0.0))

    def _next_change(self, key, rate: float) -> float:
        """Time until the flow ``key`` ends, crosses its eager fragment, is matched or
        leaves its sender (a rate change or a release)."""
        f = self.flows[key]
        if math.isinf(rate):
            return 0.0
        until = f["left"] / rate
        sent = f["size"] - f["left"]
        if sent < f["eager"] - _EPS_BYTES:
            until = min(until, (f["eager"] - sent) / rate)
        if self.send_open[key[0]] and f["cross"] and self.step[key[0]] == key[1]:
            window, buffer = self._window(f), self.fabric.nic_send_buffer_bytes
            if f["left"] > window + _EPS_BYTES:
                if window < buffer - _EPS_BYTES and sent >= f["eager"] - _EPS_BYTES:
                    # what is left falls as the window opens, both at the flow's rate
                    until = min(until, (f["left"] - window) / (2 * rate), (buffer - window) / rate)
                else:
                    until = min(until, (f["left"] - window) / rate)
            if self.now < f["matched"] < math.inf:
                until = min(until, f["matched"] - self.now)
        return until

    def _settle(self, s: int, k: int, f: dict) -> None:
        """Release the sender and end the receive of flow (s, k) where they are due."""
        done = f["left"] <= _EPS_BYTES
        released = (
            f["cross"] and f["left"] <= self._window(f) + _EPS_BYTES and f["matched"] <= self.now
        )
        if self.step[s] == k and self.send_open[s] and (done or released):
            self.send_open[s] = False
            self._leave_if_done(s)
        if done:
            d = f["dst"]
            del self.flows[(s, k)]
            self.recv_open[d] = False
            self._leave_if_done(d)

    def _leave_if_done(self, r: int) -> None:
        if self.send_open[r] or self.recv_open[r]:
            return
        k = int(self.step[r]) + 1
        self.ends[k - 1, r] = self.now
        self.step[r] = k
        self.posted[r] = False
        if k < self.nsteps:
            heapq.heappush(self.posts, (self.now + float(self.overhead[k, r]), r))

    def _post(self, r: int) -> None:
        k = int(self.step[r])
        self.posted[r] = True
        self.send_open[r] = bool(self.real[k, r])
        self.recv_open[r] = bool(self.real[k, self.src[k, r]])
        for s in (r, int(self.src[k, r])):  # my send, and the send I receive
            d = int(self.dst[k, s])
            ready = all(self.step[x] == k and self.posted[x] for x in (s, d))
            if self.real[k, s] and ready and (s, k) not in self.flows:
                g = self.fabric.gpus_per_node
                cross = s // g != d // g
                alpha = self.fabric.nic_us if cross else self.fabric.scaleup_us
                size = float(self.nb[k, s])
                eager = min(self.fabric.nic_eager_bytes, size) if cross else 0.0
                self.flows[(s, k)] = {"src": s, "dst": d, "left": size, "size": size,
                                      "cross": cross,
                                      "start": self.now + alpha + self.delay[k, s],
                                      "eager": eager, "matched": math.inf, "step": k}  # fmt: skip
        self._leave_if_done(r)


def _rates(fabric: Fabric, running: list[dict]) -> np.ndarray:
    """Max-min fair rates (bytes per µs) of the running flows (inf: a free tier)."""
    n = len(running)
    if not n:
        return np.zeros(0)
    src = np.array([f["src"] for f in running], dtype=np.int64)
    dst = np.array([f["dst"] for f in running], dtype=np.int64)
    cross = np.array([f["cross"] for f in running], dtype=bool)
    size = np.array([f["size"] for f in running])
    caps: list[float] = []
    members: list[np.ndarray] = []
    idx = np.arange(n)
    for tier, rate in ((cross, fabric.nic_GBps), (~cross, fabric.scaleup_GBps)):
        if not tier.any() or math.isinf(rate):
            continue
        for ends in (src, dst):  # each port's sending side, then its receiving side
            for port in np.unique(ends[tier]):
                caps.append(rate * _BYTES_PER_US)
                members.append(idx[tier & (ends == port)])
    senders = np.unique(src[cross]).size
    per_nic = (cross.sum() / senders, size[cross].sum() / senders) if senders else (1.0, None)
    if cross.any() and (math.isfinite(fabric.fabric_GBps) or fabric.fabric_flows):
        caps.append(float(fabric.cap_GBps(*per_nic)) * _BYTES_PER_US)
        members.append(idx[cross])
    pairs = set(zip(src.tolist(), dst.tolist(), strict=True))
    for i in range(n):
        if cross[i] and (dst[i], src[i]) in pairs and math.isfinite(fabric.exchange_GBps):
            caps.append(fabric.exchange_GBps * _BYTES_PER_US)
            members.append(idx[i : i + 1])
        if not cross[i] and fabric.scaleup_peer_GBps < fabric.scaleup_GBps:
            caps.append(fabric.scaleup_peer_GBps * _BYTES_PER_US)
            members.append(idx[i : i + 1])
    rates = fair_rates(np.array(caps), members, n)
    if senders > 1 and fabric.fabric_tail:  # the tail of that many NICs at once
        rates[cross] /= fabric.stretch(senders, *per_nic)
    return rates
