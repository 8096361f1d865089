"""A two-tier fabric: one scale-out NIC per GPU, scale-up links inside a node.

Times are in µs, bandwidths in GB/s (1e9 bytes per second, so ``bytes / (GBps * 1e3)`` is
µs). The model is a fluid one, evaluated on whole arrays of flows at once:

* A **step** is one grouped call (an MPI batch of Isend/Irecv, an NCCL group): it costs
  ``stage_us`` (launch and synchronisation) plus ``msg_us`` for every message a rank posts,
  then its flows run. A flow starts when both of its ranks have posted
  (``max(post[src], post[dst])``) and a rank finishes the step when all of its flows, sent
  and received, have finished.
* Flows between nodes use the NICs, flows inside a node the scale-up tier. A flow pays the
  tier's latency once (``nic_us`` or ``scaleup_us``), then lasts as long as the busier of its
  two ports needs to drain everything it carries in that step (each port serves its flows
  in proportion to their bytes, so all flows of a port end together): a port that sends
  ``S`` bytes needs ``S / B``, a NIC that receives ``R`` bytes from ``k`` concurrent senders
  needs ``R / B * (1 + incast * (k - 1) * over)`` (incast), where ``over`` is the share
  of the bytes queued at the switch, ``R (k - 1) / k``, that do not fit in the port's
  buffer ``switch_buffer_MB`` (all of them when it is 0). A lossless fabric (PFC with
  congestion control) pauses senders and has a small ``incast``; a lossy one drops and
  retransmits and has a large one: the profile holds both and names the default.
* On scale-up, ``scaleup_GBps`` is each GPU's port (all its links together) and its flows
  share it like a NIC's (without incast loss); a flow is also capped by the link to its
  peer, ``scaleup_peer_GBps`` (equal to the port behind NVSwitch; one xGMI link of seven
  on MI300X), so it lasts at least ``bytes / scaleup_peer_GBps``.
* ``fabric_GBps`` caps the bytes that cross the switch per second, all NICs together
  (infinite by default: a non-blocking fabric). Where it binds, the step's sending NICs
  share it equally, none faster than alone (its busiest flow's time), the share of a NIC
  that has finished going to those still sending (:func:`shared_cap_us`): NICs that all
  carry the same bytes end together at the step's bytes over the cap, and a step whose
  NICs carry unequal bytes ends later than that, its busiest NICs running on after the
  others are done (``python -m commbench.benchmarks.shared_cap`` on the emulated 4x2
  cluster: six NICs sending 1052 KiB beside two sending 526 KiB, the two ended after 47.5
  ms and the six's slowest after 95.8; from that run's rate and cap this model says
  51.1 and 95.7, one cap for the step's bytes 89.4). A measured property: ``commbench
  calibrate`` streams through every NIC at once and keeps the rate when it is below the
  NICs' sum (on the emulated cluster, 2 shared cores carry every packet, so 8 busy NICs
  reach less than 8 x one). ``fabric_flows``
  refines it by the number of concurrent flows: ``(flows per NIC, GB/s)`` points (every
  rank streaming to k remote ranks at once, ``commbench calibrate``'s ``flows`` points);
  a step's cap is the curve at its scale-out flows per sending NIC (interpolated on a log
  axis, flat beyond the ends), e.g. where each flow costs the hosts CPU time. Points
  may name the bytes each NIC sent, ``(flows, GB/s, bytes)``, one curve per size
  (calibrate measures two): a step reads the curves at its bytes per sending NIC (log
  axis, flat beyond), as the rate of k flows changes with their size (on the emulated
  cluster six flows of 1 MiB in all ran ~10 % slower per byte than of 256 KiB or 4 MiB).
* ``fabric_tail``: of n NICs sending at once the slowest ends later than the median, and a
  step ends with its slowest. Stored per doubling of the NICs (``(flows per NIC,
  stretch[, bytes per NIC])``, read as ``fabric_flows`` is), a step's rates run
  ``stretch ** log2(m)`` slower while m of its NICs send (:meth:`Fabric.stretch`). Where
  it is set the cap is the NICs' throughput: ``commbench calibrate`` fits the cap from the
  median rank's time and the tail from the slowest rank's over it, so a step of every NIC
  ends where the slowest rank's cap put it, and a step of fewer NICs gets the tail of that
  many (on the emulated 8x1 at 1 MiB, all 8 NICs: one stream 87 ms, the median rank
  89-91, the slowest 98-108). The ``log n`` form is within the passes' spread of
  calibrate's ``nics`` points (k of the NICs in a cycle; cost-model.md, "The tail").
  Empty by default.
* ``nic_burst_bytes``: a NIC shaped by a token bucket (the emulated cluster's tc tbf)
  passes that many bytes at once after an idle spell and refills at its rate, so a
  message's first bytes (up to what the bucket holds) cost no wire time: the all-reduce
  models keep each NIC's bucket from step to step, and a call finds it as the timed
  loop's previous call left it, refilled through the barrier between them (HAN: full
  for its first segment). Messages of a few KiB, which such a NIC would charge a rate
  time far above their latency, then cost their latency while the loop's bytes per
  call refill in time, as measured. The all-to-allv steps
  do not use it (their flows are 128 KiB and more at the sizes validated). 0 by default.
* ``scaleup_eager_bytes`` / ``nic_eager_bytes``: a host-driven rank's send of at most
  this many bytes completes without its receiver (the MPI library's eager protocol), so
  in a ring, where a rank waits only for its left neighbour's message, a rank's step
  does not wait for its right neighbour; larger messages wait for the receiver to post.
  0 by default (every message waits).
* ``exchange_GBps`` caps one direction of an exchange: a flow whose reverse (the same
  pair, the other way) moves in the same step lasts at least its bytes over it. Measured
  by ``commbench calibrate`` (every rank exchanging with one peer at once) and kept where
  it is below a one-way stream: over MPI's TCP transport both directions of a pair share
  one connection, and on the emulated cluster such an exchange runs at ~60 % of a
  one-way flow (fan-out's flows are exchanges too, but share their NICs so that this
  cap does not bind them). Infinite by default.

The makespan of one step is therefore at least the busiest port's bytes over its
bandwidth — the lower bound — and a flow into a hot port holds its sender until that port
drains, which is how stragglers appear.

A system profile's ``[fabric]`` table holds the constants per node and per NIC, with their
sources (:class:`commbench.kernels.model.fabric_table.FabricTable`, which turns itself into
a :class:`Fabric`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

#: bytes per µs in one GB/s
_BYTES_PER_US = 1e3


def stage_cost_bytes(stage_us: float, latency_us: float, GBps: float) -> int:
    """FAST's ``stage_cost_bytes``: the fixed cost of one scale-out stage in the bytes one
    NIC of ``GBps`` moves meanwhile. A stage costs ``stage_us`` (launch and
    synchronisation) plus one message latency, ``latency_us``, before its bytes flow (as
    :func:`step_finish` charges a step)."""
    return int(round((stage_us + latency_us) * GBps * _BYTES_PER_US))


@dataclass(frozen=True)
class Fabric:
    """Constants of one system (one NIC per GPU, ``gpus_per_node`` GPUs per node).

    ``scaleup_GBps``, ``scaleup_peer_GBps`` (default: ``scaleup_GBps``) and
    ``reduce_GBps`` may be ``math.inf`` (free); ``nic_GBps`` must be finite. All must be
    positive. Latencies and costs must be finite and non-negative.

    ``proxy_us``: one pass through the host proxy thread that drives a network step of
    NCCL/RCCL; ``put_us``: one NVSHMEM put through its transport (a CPU proxy with
    libfabric, ~0 with IBGDA); ``switch_buffer_MB``: the switch buffer one receiving port
    can fill before incast costs anything (0: incast costs from the first byte);
    ``nccl_ll128``: NCCL may use its LL128 protocol (only where the GPU-NIC path is a PCIe
    switch or closer, ``tuning.cc``).
    """

    gpus_per_node: int
    nic_GBps: float
    nic_us: float
    scaleup_GBps: float
    scaleup_us: float
    stage_us: float = 0.0
    msg_us: float = 0.0
    incast: float = 0.0
    scaleup_peer_GBps: float | None = None
    reduce_GBps: float = math.inf
    proxy_us: float = 0.0
    put_us: float = 0.0
    #: a host-driven (two-sided) butterfly step between nodes: posts, the partner's
    #: lateness and the latency, as calibrate's chains of empty exchanges measure it
    #: (None: ``stage_us``, two posts and ``nic_us``, an empty round's); and what a call
    #: of such steps pays once (how late its ranks come, the slowest one's end)
    butterfly_step_us: float | None = None
    butterfly_call_us: float = 0.0
    #: a host-driven ring step's fixed cost (on either tier), as calibrate's calls of
    #: steps of a small message around the ring measure it (None: an empty round's cost
    #: and the link's latency, :func:`~commbench.kernels.model.allreduce.ring`'s
    #: default), and what a call of them pays once
    ring_step_us: float | None = None
    ring_call_us: float = 0.0
    #: the latency between nodes with one pair of ranks exchanging and the others
    #: waiting (calibrate's quiet ping-pong), where ``nic_us`` is every rank's at once
    #: (None: ``nic_us`` however many exchange; :meth:`nic_us_among`)
    nic_quiet_us: float | None = None
    switch_buffer_MB: float = 0.0
    nccl_ll128: bool = True
    fabric_GBps: float = math.inf
    #: ``((flows per NIC, GB/s), ...)``: the cap by concurrent flows (empty: ``fabric_GBps``
    #: whatever the flows)
    fabric_flows: tuple = ()
    #: ``((flows per NIC, stretch, bytes per NIC), ...)`` (or pairs, one curve): how much
    #: later than the median the slowest of the NICs sending at once ends, per doubling
    #: of their number (1: no tail; empty: none). Where it is set, the cap is the NICs'
    #: throughput (the median NIC's) and a step of n NICs runs ``stretch ** log2(n)``
    #: slower (:meth:`stretch`)
    fabric_tail: tuple = ()
    #: one direction of an exchange with one peer (both directions of a pair at once), in
    #: GB/s, where it is below a one-way flow's rate (inf: no such limit)
    exchange_GBps: float = math.inf
    #: the same for one-sided puts of cells both ways at once (NVRAR's cpu inter-node
    #: steps), in wire bytes; inf: ``exchange_GBps``
    put_exchange_GBps: float = math.inf
    #: bytes a NIC passes at once after an idle spell before its rate limits them: the
    #: depth of a token bucket refilled at ``nic_GBps`` (tc tbf's ``burst`` on the
    #: emulated cluster; 0, the default, on a NIC that sends every byte at its rate)
    nic_burst_bytes: float = 0.0
    #: the largest message a host-driven rank sends without waiting for its receiver (the
    #: MPI library's eager limit) inside a node and across nodes; 0, the default: every
    #: message waits for its receiver to post (:func:`~commbench.kernels.model.allreduce.ring`)
    scaleup_eager_bytes: float = 0.0
    nic_eager_bytes: float = 0.0
    #: bytes of a message between nodes still on their way when a host-driven rank's
    #: send returns (socket and NIC queue: the send leaves them to the kernel); 0, the
    #: default: a send returns when its flow ends. Spread-out and pairwise all-to-allv
    #: run flow by flow where it is set (:mod:`~commbench.kernels.model.flows`)
    nic_send_buffer_bytes: float = 0.0
    #: the window a flow between nodes has open once its first fragment is through (the
    #: bytes its sender's kernel holds; it opens by every byte sent after, up to
    #: ``nic_send_buffer_bytes``, and the sender is released once what is left fits it);
    #: 0, the default: the whole buffer from the start. Used where
    #: ``nic_send_buffer_bytes`` is set (:mod:`~commbench.kernels.model.flows`)
    nic_queue_bytes: float = 0.0
    #: the share of a NIC's rate NVRAR's LL8 cells carry as payload: NCCL's LL ring
    #: efficiency (1/4) where GPU threads store the cells; 1/2 (4 payload bytes in an
    #: 8-byte cell) where MPI puts move them at the NIC's rate (the cpu backend)
    ll8_share: float = 0.25
    #: a retransmission timeout (µs): where it is set (a lossy fabric, ``commbench
    #: calibrate``), the ranks of a step whose NICs take two or more senders at once may
    #: pay it, by ``loss_late`` (:func:`late_chance`), and no ``incast`` multiplier; 0: none
    loss_timeout_us: float = 0.0
    #: ``((senders, chance, bytes per NIC), ...)`` (or pairs, one curve): the chance that
    #: a NIC taking that many senders at once, that many bytes in all, pays a timeout in a
    #: step (read as :meth:`cap_GBps` reads its curves; ``commbench calibrate``'s lossy
    #: ``flows`` points); empty: every such step pays one
    loss_late: tuple = ()
    #: ``((senders, chance, bytes), ...)``: the chance that a NIC its senders overfill
    #: (:func:`overfilled_ports`: full while two or more of them have rate to spare, so
    #: they push faster than it drains), that many senders converging on it for that many
    #: bytes at its rate, pays a timeout (read as ``loss_late``; ``commbench calibrate``'s
    #: lossy ``hot`` points); empty: such a NIC is charged as ``loss_late`` has it
    loss_overfill: tuple = ()
    #: the calls a reported time averages: the slowest rank's mean over m calls holds the
    #: largest share of m calls any rank drew a timeout in (:func:`late_share`); 1: one
    #: call's expected time
    calls_averaged: int = 1

    def __post_init__(self) -> None:
        g = self.gpus_per_node
        if isinstance(g, bool) or not isinstance(g, int | np.integer) or g < 1:
            raise ValueError(f"fabric: gpus_per_node must be an integer >= 1 (got {g!r})")
        if not isinstance(self.nccl_ll128, bool):
            raise ValueError(f"fabric: nccl_ll128 must be true or false (got {self.nccl_ll128!r})")
        if self.scaleup_peer_GBps is None:
            object.__setattr__(self, "scaleup_peer_GBps", self.scaleup_GBps)
        if not 0 < _number(self, "ll8_share") <= 1:
            raise ValueError(f"fabric: ll8_share must be in (0, 1] (got {self.ll8_share!r})")
        for name in ("nic_GBps", "scaleup_GBps", "scaleup_peer_GBps", "reduce_GBps", "fabric_GBps",
                     "exchange_GBps", "put_exchange_GBps"):  # fmt: skip
            v = _number(self, name)
            if not v > 0 or (name == "nic_GBps" and math.isinf(v)):
                raise ValueError(
                    f"fabric: {name} must be a positive bandwidth in GB/s (got {v!r}); "
                    "fix the system profile or the command-line override"
                )
        object.__setattr__(self, "_flow_caps", _curves(self, "fabric_flows", "GB/s > 0", math.inf))
        object.__setattr__(self, "_tails", _curves(self, "fabric_tail", "stretch >= 1", 1.0))
        object.__setattr__(self, "_late", _curves(self, "loss_late", "chance in [0, 1]", 0.0,
                                                  lambda v: 0 <= v <= 1))  # fmt: skip
        object.__setattr__(self, "_overfill", _curves(self, "loss_overfill", "chance in [0, 1]",
                                                      0.0, lambda v: 0 <= v <= 1))  # fmt: skip
        m = self.calls_averaged
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
            raise ValueError(f"fabric: calls_averaged must be an integer >= 1 (got {m!r})")
        for name in (
            "nic_us",
            "scaleup_us",
            "stage_us",
            "msg_us",
            "incast",
            "proxy_us",
            "put_us",
            "butterfly_call_us",
            "ring_call_us",
            "switch_buffer_MB",
            "nic_burst_bytes",
            "scaleup_eager_bytes",
            "nic_eager_bytes",
            "nic_send_buffer_bytes",
            "nic_queue_bytes",
            "loss_timeout_us",
        ):
            v = _number(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"fabric: {name} must be a finite number >= 0 (got {v!r})")
        for name in ("butterfly_step_us", "ring_step_us", "nic_quiet_us"):  # None: not measured
            if getattr(self, name) is not None:
                v = _number(self, name)
                if not (v >= 0 and math.isfinite(v)):
                    raise ValueError(f"fabric: {name} must be a finite number >= 0 (got {v!r})")

    def with_(self, **changes) -> Fabric:
        """A copy with some constants replaced (validated again)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"fabric: unknown constant(s) {', '.join(sorted(unknown))}")
        return Fabric(**{**asdict(self), **changes})

    def as_dict(self) -> dict:
        return asdict(self)

    def nic_us_among(self, active: int, ranks: int) -> float:
        """The latency between nodes while ``active`` of a job's ``ranks`` ranks exchange
        messages at once (the others waiting, as a hierarchical collective's node leaders
        exchange while the other ranks wait for them).

        ``nic_us`` is every rank's at once. Where ranks share cores (the emulated
        cluster: 8 ranks on 2) a message's latency is mostly the hosts' work on it spread
        over the ranks that move messages, so ``active`` of them pay that share of it,
        never less than one pair alone (``nic_quiet_us``): on the emulated 4x2, an 8 B
        exchange step across nodes took 55-60 us with all 8 ranks exchanging, 27-28 with
        the 4 node leaders, 24-26 with one pair (``python -m
        commbench.benchmarks.exchanging_ranks``; model-validation-history.md, "HAN's leaders").
        Where each rank has cores of its own the two latencies agree and this is
        ``nic_us``.
        """
        if self.nic_quiet_us is None or ranks < 1:
            return self.nic_us
        share = self.nic_us * min(max(active, 1), ranks) / ranks
        return float(min(self.nic_us, max(self.nic_quiet_us, share)))

    def nic_time_us(self, nbytes) -> np.ndarray | float:
        """Time for ``nbytes`` through one NIC at full rate."""
        return nbytes / (self.nic_GBps * _BYTES_PER_US)

    def scaleup_time_us(self, nbytes) -> np.ndarray | float:
        """Time for ``nbytes`` through one GPU's scale-up port (all its links)."""
        return nbytes / (self.scaleup_GBps * _BYTES_PER_US)

    def peer_time_us(self, nbytes) -> np.ndarray | float:
        """Time for ``nbytes`` from one GPU to one peer of its node (port and link)."""
        return nbytes / (min(self.scaleup_GBps, self.scaleup_peer_GBps) * _BYTES_PER_US)

    def cap_GBps(self, flows_per_nic: float = 1.0, nic_bytes=None) -> float | np.ndarray:
        """The switch-crossing rate of all NICs together when each sending NIC carries
        ``flows_per_nic`` concurrent flows of ``nic_bytes`` in all (``fabric_flows``, else
        ``fabric_GBps``). Each measured size's curve is read at the flow count (on a log
        axis, flat beyond its ends); between sizes the rate is interpolated on a log axis
        of the bytes (flat beyond them; the smallest size when ``nic_bytes`` is None)."""
        if not self.fabric_flows:
            return self.fabric_GBps
        return _read(self._flow_caps, flows_per_nic, nic_bytes)

    def stretch(self, nics, flows_per_nic: float = 1.0, nic_bytes=None) -> float | np.ndarray:
        """How much slower than the NICs' throughput a step ends when ``nics`` NICs send
        at once, each ``flows_per_nic`` flows of ``nic_bytes`` in all: the slowest of n
        behind the median, ``fabric_tail`` (read as :meth:`cap_GBps` reads its curves)
        to the power ``log2(n)`` (the largest of n samples of a light-tailed spread grows
        with ``log n``; ``commbench calibrate``'s ``nics`` points, k < P NICs, are
        within their passes' spread of it). 1 where there is no tail or one NIC sends."""
        if not self.fabric_tail:
            return 1.0 if np.ndim(nics) == 0 else np.ones(np.shape(nics))
        per_doubling = _read(self._tails, flows_per_nic, nic_bytes)
        return per_doubling ** np.log2(np.maximum(nics, 1.0))

    def loss_chance(self, senders, port_bytes) -> float | np.ndarray:
        """The chance that a NIC taking ``senders`` at once, ``port_bytes`` in all, pays a
        retransmission timeout (``loss_late``, read as :meth:`cap_GBps` reads its curves:
        flat below the smallest size measured); 1 where the fabric has no ``loss_late``
        (every such port pays one)."""
        if not self.loss_late:
            return 1.0 if np.ndim(port_bytes) == 0 else np.ones(np.shape(port_bytes))
        return _read(self._late, senders, port_bytes)

    def overfill_chance(self, senders, nbytes) -> float | np.ndarray:
        """The chance that a NIC ``senders`` overfill for ``nbytes`` pays a retransmission
        timeout (``loss_overfill``, read as :meth:`loss_chance` reads ``loss_late``); 0
        where the fabric has no ``loss_overfill``."""
        if not self.loss_overfill:
            return 0.0 if np.ndim(nbytes) == 0 else np.zeros(np.shape(nbytes))
        return _read(self._overfill, senders, nbytes)

    def wire_time_us(
        self, nbytes, concurrent=1, nic_bytes=None, message_bytes=None
    ) -> np.ndarray | float:
        """Time for ``nbytes`` from one NIC while ``concurrent`` NICs send as much at once
        (one flow each, ``nic_bytes`` in all per NIC; default ``nbytes``): its rate or
        their share of the cap, whichever is slower, stretched by the tail of that many
        NICs (:meth:`stretch`) unless the bytes are a message within the eager limit
        (``message_bytes`` at most ``nic_eager_bytes``): such a message is in the
        sender's kernel when its send returns and needs nothing of its receiver until it
        has arrived, where the tail calibrate measures (1 and 4 MiB per NIC) is of
        messages that wait for their receivers. On the emulated cluster, whose ranks
        share two cores, host-driven steps of 8-32 KiB messages ran at the untailed rate
        (Rabenseifner at 32-96 KiB on a fresh 8x1 modelled 1.10-1.15 slow with the tail,
        0.98-1.04 without; its 64 KiB rows of two validation runs likewise)."""
        per_nic = nbytes if nic_bytes is None else nic_bytes
        cap = self.cap_GBps(1.0, per_nic) * _BYTES_PER_US
        t = np.maximum(self.nic_time_us(nbytes), concurrent * nbytes / cap)
        stretch = self.stretch(concurrent, 1.0, per_nic)
        if message_bytes is not None:
            stretch = np.where(np.asarray(message_bytes) <= self.nic_eager_bytes, 1.0, stretch)
        return t * stretch

    def exchange_time_us(self, nbytes, rate_GBps: float | None = None) -> np.ndarray | float:
        """Time for ``nbytes`` one way of an exchange with one peer (both ways at once), at
        ``exchange_GBps`` or ``rate_GBps``."""
        return nbytes / ((self.exchange_GBps if rate_GBps is None else rate_GBps) * _BYTES_PER_US)

    def drain_bucket(self, tokens, idle_us, nbytes) -> tuple:
        """A NIC's token bucket (``nic_burst_bytes``) before a message of ``nbytes``:
        ``tokens`` left after its previous message, refilled at the NIC's rate over
        ``idle_us`` (up to the depth). Returns ``(bytes that pass at once, tokens left)``;
        the rest of the message pays the NIC's rate. A bucket of depth 0 frees nothing."""
        full = np.minimum(self.nic_burst_bytes, tokens + idle_us * self.nic_GBps * _BYTES_PER_US)
        free = np.minimum(full, nbytes)
        return free, full - free

    def reduce_time_us(self, nbytes) -> np.ndarray | float:
        """Time to reduce ``nbytes`` of incoming data into a buffer."""
        return nbytes / (self.reduce_GBps * _BYTES_PER_US)

    @property
    def stage_cost_bytes(self) -> int:
        """The fixed cost of one scale-out stage, in bytes one NIC moves in that time."""
        return stage_cost_bytes(stage_us=self.stage_us, latency_us=self.nic_us, GBps=self.nic_GBps)


def _curves(fabric: Fabric, name: str, value: str, top: float, ok=None) -> tuple:
    """Validate ``fabric_flows``-shaped points (``(flows per NIC, value)`` pairs or
    ``(flows, value, bytes per NIC)`` triples, values in ``(0, top)`` where ``top`` is
    infinite, else in ``[top, inf)``, or where ``ok(value)``), store them as floats and
    return them as per-size curves on log axes: ``((log bytes, log flows, values), ...)``
    (pairs: one curve, under size 0)."""
    points = tuple(tuple(float(x) for x in point) for point in getattr(fabric, name))
    object.__setattr__(fabric, name, points)
    widths = {len(point) for point in points}
    if ok is None:
        ok = (lambda v: 0 < v < top) if math.isinf(top) else (lambda v: top <= v < math.inf)
    if points and (
        len(widths) > 1
        or widths - {2, 3}
        or not all(pt[0] >= 1 and ok(pt[1]) for pt in points)
        or not all(pt[2] > 0 for pt in points if len(pt) == 3)
    ):
        raise ValueError(
            f"fabric: {name} must be (flows per NIC >= 1, {value}) pairs, or "
            f"(flows, {value.split()[0]}, bytes per NIC > 0) triples (got {points!r})"
        )
    curves: dict[float, list[tuple[float, ...]]] = {}
    for point in points:  # one curve per size (pairs: one, under 0)
        curves.setdefault(point[2] if len(point) == 3 else 0.0, []).append(point[:2])
    for curve in curves.values():
        if [k for k, _ in curve] != sorted({k for k, _ in curve}):
            raise ValueError(
                f"fabric: {name} must be in increasing flow counts, once each (per size)"
            )
    return tuple(
        (math.log(size) if size > 0 else 0.0, np.log([k for k, _ in curve]),
         np.array([v for _, v in curve]))
        for size, curve in sorted(curves.items())
    )  # fmt: skip


def _read(curves: tuple, flows_per_nic, nic_bytes) -> float | np.ndarray:
    """:func:`_curves`' value at a flow count (log axis, flat beyond its ends) and bytes
    per NIC (log axis between the sizes, flat beyond; the smallest size when None)."""
    x = math.log(max(flows_per_nic, 1.0))
    if len(curves) == 1 or nic_bytes is None:
        return float(np.interp(x, curves[0][1], curves[0][2]))
    values = [float(np.interp(x, ks, vs)) for _, ks, vs in curves]
    at = np.log(np.maximum(nic_bytes, 1.0))  # an array where the caller has one per flow
    out = np.interp(at, [size for size, _, _ in curves], values)
    return float(out) if np.ndim(out) == 0 else out


def _number(fabric: Fabric, name: str) -> float:
    v = getattr(fabric, name)
    if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
        raise ValueError(f"fabric: {name} must be a number (got {v!r})")
    return float(v)


def step_finish(
    fabric: Fabric,
    ready_us: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    nbytes: np.ndarray,
    *,
    tail_nics: int | None = None,
) -> np.ndarray:
    """Per-rank finish time of one grouped step whose flows are ``src -> dst``.

    ``ready_us[r]`` is when rank r enters the step. Zero-byte flows and self flows
    (``src == dst``, a local copy) cost nothing and post no message. ``tail_nics``: the
    most NICs whose slowest the step's flows wait for (:meth:`Fabric.stretch`), where
    the NICs sending at once are groups that start apart (default: all of them).
    Returns a new array.
    """
    ready = np.asarray(ready_us, dtype=np.float64)
    p = ready.size
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    nb = np.asarray(nbytes, dtype=np.float64)
    keep = (nb > 0) & (src != dst)
    if not keep.all():
        src, dst, nb = src[keep], dst[keep], nb[keep]
    post = ready + fabric.stage_us
    if fabric.msg_us:
        post = post + fabric.msg_us * (
            np.bincount(src, minlength=p) + np.bincount(dst, minlength=p)
        )
    finish = post.copy()
    if src.size == 0:
        return finish
    g = fabric.gpus_per_node
    cross = (src // g) != (dst // g)
    if cross.all():
        _tier(fabric, finish, post, src, dst, nb, p, nic=True, tail_nics=tail_nics)
    elif not cross.any():
        _tier(fabric, finish, post, src, dst, nb, p, nic=False)
    else:
        _tier(fabric, finish, post, src[cross], dst[cross], nb[cross], p, nic=True,
              tail_nics=tail_nics)  # fmt: skip
        up = ~cross
        _tier(fabric, finish, post, src[up], dst[up], nb[up], p, nic=False)
    return finish


def _overflow(fabric: Fabric, received: np.ndarray, senders: np.ndarray) -> np.ndarray:
    """Share of the bytes queued at a receiving port (``R (k-1)/k``) beyond its buffer."""
    buffer = fabric.switch_buffer_MB * 1e6
    if buffer <= 0:
        return np.ones_like(received)
    queued = received * np.maximum(senders - 1, 0) / np.maximum(senders, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(queued > buffer, (queued - buffer) / queued, 0.0)
    return share


def shared_cap_us(nbytes, alone_us, cap: float, stretch=None) -> np.ndarray:
    """When each of NICs that start together ends, sharing ``cap`` bytes per µs.

    NIC i sends ``nbytes[i]`` and alone would take ``alone_us[i]`` (its rate
    ``nbytes / alone_us``). The NICs still sending share the cap equally, a NIC never
    above its own rate (its unused share going to the others); as one ends, the others'
    shares grow. Equal NICs end together at ``max(alone, sum(nbytes) / cap)``.
    ``stretch(m)``: how much slower every rate runs while m NICs send (the tail of m
    NICs at once, :meth:`Fabric.stretch`; None: 1), so a NIC left sending alone runs
    at its own rate again."""
    nb = np.asarray(nbytes, dtype=np.float64)
    alone = np.asarray(alone_us, dtype=np.float64)
    own = nb / alone
    if own.sum() <= cap and (stretch is None or nb.size < 2):
        return alone.copy()
    ends = np.empty(nb.size)
    left = nb.copy()
    live = np.arange(nb.size)
    now = 0.0
    while live.size:
        rate = _equal_shares(own[live], cap)
        if stretch is not None:
            rate = rate / stretch(live.size)
        need = left[live] / rate
        dt = float(need.min())
        now += dt
        done = need <= dt * (1 + 1e-9)
        ends[live[done]] = now
        left[live] -= rate * dt
        live = live[~done]
    return ends


def fair_rates(caps: np.ndarray, members: list[np.ndarray], n: int) -> np.ndarray:
    """Max-min fair rates of ``n`` flows under constraints: constraint i lets the flows
    ``members[i]`` together move at most ``caps[i]`` (progressive filling: raise every
    unfrozen flow's rate together until a constraint is full, freeze its flows, repeat).
    A flow in no constraint gets ``inf``."""
    incidence = np.zeros((len(members), n))
    for i, m in enumerate(members):
        incidence[i, m] = 1.0
    rate = np.full(n, math.inf)
    frozen = np.zeros(n, dtype=bool)
    left = np.asarray(caps, dtype=np.float64).copy()
    while True:
        counts = incidence @ ~frozen
        live = counts > 0
        if not live.any():
            return rate
        share = np.full(len(members), math.inf)
        share[live] = left[live] / counts[live]
        i = int(np.argmin(share))
        level = max(float(share[i]), 0.0)
        pick = (incidence[i] > 0) & ~frozen
        rate[pick] = level
        frozen |= pick
        left -= incidence[:, pick] @ rate[pick]


def overfilled_ports(fabric: Fabric, src, dst, nb, p: int) -> tuple[np.ndarray, np.ndarray]:
    """``(senders, bytes)`` per NIC of a step's flows between nodes: the most senders
    that overfilled it at once, and the bytes it took while overfilled. The flows run in
    time at their max-min fair rates under each NIC's rate, sending and receiving
    (:func:`fair_rates`, phase by phase to the last flow's end: at most one phase a
    flow); a receiving NIC is overfilled in a phase where it is full and two or more of
    its flows come from NICs with rate to spare. Their TCP senders push faster than it
    drains, and a shallow switch queue drops (on the emulated shallow queue a rank whose
    NIC a skewed fan-out overfilled paid a timeout in 0.4-0.95 of calls, others ~0.3).
    Where every NIC sends and receives alike (a uniform fan-out, a permutation) every
    NIC fills at once and none is overfilled."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    left = np.asarray(nb, dtype=np.float64).copy()
    rate = fabric.nic_GBps * _BYTES_PER_US
    full = rate * (1.0 - 1e-9)
    senders, taken = np.zeros(p, np.int64), np.zeros(p)
    live = np.flatnonzero(left > 0)
    while live.size:
        s, d = src[live], dst[live]
        members = [np.flatnonzero(s == r) for r in np.unique(s)]
        members += [np.flatnonzero(d == r) for r in np.unique(d)]
        r = fair_rates(np.full(len(members), rate), members, live.size)
        until = left[live] / r
        dt = float(until.min())
        spare = np.bincount(d, np.bincount(s, r, p)[s] < full, p)  # per NIC, senders with spare
        into = np.bincount(d, r, p)
        hit = (into >= full) & (spare >= 2)
        senders[hit] = np.maximum(senders[hit], spare[hit].astype(np.int64))
        taken[hit] += into[hit] * dt
        left[live] = np.where(until <= dt * (1.0 + 1e-12), 0.0, left[live] - r * dt)
        live = live[left[live] > 0]
    return senders, taken


def port_stalls(fabric: Fabric, src, dst, nb, p: int) -> tuple:
    """``(chance, senders, cover_us)`` per NIC of a step's flows between nodes on a lossy
    fabric: :func:`port_chance`'s, and where the fabric has ``loss_overfill``, a NIC its
    senders overfill (:func:`overfilled_ports`) at the larger of that chance and its
    overfill's; ``cover_us``, how long such a NIC's other flows keep it busy while one of
    its k senders waits out a timeout (``(k - 1) / k`` of the bytes it took overfilled, at
    its rate): a stall there ends the call that much less late."""
    chance, senders = port_chance(fabric, dst, nb, p)
    cover = np.zeros(p)
    if fabric.loss_overfill:
        k, taken = overfilled_ports(fabric, src, dst, nb, p)
        for d in np.flatnonzero(k >= 2):
            chance[d] = max(chance[d], fabric.overfill_chance(k[d], taken[d]))
            cover[d] = taken[d] * (k[d] - 1) / k[d] / (fabric.nic_GBps * _BYTES_PER_US)
    return chance, senders, cover


def port_chance(fabric: Fabric, dst, nb, p: int) -> tuple[np.ndarray, np.ndarray]:
    """``(chance, senders)`` per NIC of a step's flows between nodes on a lossy fabric: a
    NIC taking k >= 2 senders pays a retransmission timeout with ``loss_late``'s chance
    at k and its bytes (every time where the fabric has no ``loss_late``), stalling one
    of its k senders' flows. Loss-based TCP into a shallow port: every sender's window
    grows until the port drops, and a drop the fast retransmit misses costs a timeout
    (200 ms at least on Linux); one sender a port drops nothing it cannot recover at
    once."""
    dst = np.asarray(dst, np.int64)
    senders = np.bincount(dst, minlength=p)
    into = np.bincount(dst, np.asarray(nb, dtype=np.float64), p)
    chance = np.zeros(p)
    for d in np.flatnonzero(senders >= 2):
        chance[d] = fabric.loss_chance(senders[d], into[d])
    return chance, senders


def late_chance(fabric: Fabric, src, dst, nb, p: int, ports=None) -> np.ndarray:
    """Per rank, the chance that a step's flows between nodes make it late by a
    retransmission timeout on a lossy fabric (``ports``: :func:`port_chance`'s, computed
    here where not given): the flow a NIC stalls makes both its ends late, so rank r is
    on time with ``(1 - p_r) * prod over the NICs d it sends to of (1 - p_d / k_d)``."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    chance, senders = (ports if ports is not None else port_chance(fabric, dst, nb, p))[:2]
    on_time = 1.0 - chance
    np.multiply.at(on_time, src, 1.0 - chance[dst] / np.maximum(senders[dst], 1))
    return 1.0 - on_time


def late_by(fabric: Fabric, src, dst, end_us, base_us, ports) -> np.ndarray:
    """Per rank, what a timeout adds to its time in a step where it pays one: the flow
    stalled (one of its NIC's k senders', or its own into a NIC it sends to, each as
    likely as :func:`late_chance` has it from ``ports``, :func:`port_stalls`') ends
    ``loss_timeout_us`` after its own end, less its NIC's cover, which adds only as far as that
    outlasts the rank's other flows (``base_us``, per rank): a whole timeout where the
    flows end together (a uniform call), less where the rank waits for a heavier flow
    anyway."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    base = np.asarray(base_us, dtype=np.float64)
    p = base.size
    chance, senders, cover = ports
    lost = fabric.loss_timeout_us - cover[dst]
    weight = chance[dst] / np.maximum(senders[dst], 1)  # the chance this flow is stalled
    added, weights = np.zeros(p), np.zeros(p)
    for ends in (src, dst):
        gain = np.maximum(np.asarray(end_us) + lost - base[ends], 0.0)
        np.add.at(added, ends, weight * gain)
        np.add.at(weights, ends, weight)
    return np.divide(added, weights, out=np.zeros(p), where=weights > 0)


def late_share(chance, calls: int) -> float:
    """The expected largest share of ``calls`` calls that any one rank is late in, each
    rank late in a call with its ``chance``, independently: what timeouts add to the
    slowest rank's mean over the calls, in timeouts (one call: the chance that any rank
    is late)."""
    q = np.clip(np.asarray(chance, dtype=np.float64), 0.0, 1.0)
    q = q[q > 0]
    if not q.size:
        return 0.0
    c = np.arange(calls + 1)
    ways = np.array([math.comb(calls, k) for k in c], dtype=np.float64)
    pmf = ways * q[:, None] ** c * (1 - q[:, None]) ** (calls - c)  # rank x late calls
    at_most = np.prod(np.cumsum(pmf, axis=1), axis=0)  # P(no rank late in more than c)
    return float((1.0 - at_most[:-1]).sum() / calls)


def expected_slowest(base_us, chance, late_us, calls: int) -> float:
    """The expected slowest rank's mean over ``calls`` calls where rank r takes
    ``base_us[r]`` and, in each call, ``late_us`` more (one number, or one per rank) with
    its ``chance``, independently: ``E[max_r (base_r + late_r * S_r)]``, ``S_r`` the
    share of the calls rank r is late in. With equal bases and lateness it is the base
    plus the lateness times :func:`late_share`; where some ranks take longer anyway, a
    lighter rank's timeout hides behind them as far as it ends before them."""
    base = np.asarray(base_us, dtype=np.float64)
    by = np.broadcast_to(np.asarray(late_us, dtype=np.float64), base.shape)
    q = np.where(by > 0, np.clip(np.asarray(chance, dtype=np.float64), 0.0, 1.0), 0.0)
    top = float(base.max())
    if not (q > 0).any():
        return top
    c = np.arange(calls + 1)
    ways = np.array([math.comb(calls, k) for k in c], dtype=np.float64)
    cdf = np.cumsum(ways * q[:, None] ** c * (1 - q[:, None]) ** (calls - c), axis=1)
    cdf[:, -1] = 1.0
    steps = (base[:, None] + by[:, None] * c / calls).ravel()  # where a rank's time can be
    xs = np.unique(steps[steps >= top])
    # at each x, P(every rank within x): a rank within x is late in at most k calls
    unit = np.where(by > 0, by, 1.0) / calls
    k = np.floor((xs[:, None] - base[None, :]) / unit[None, :] + 1e-9).astype(np.int64)
    within = np.where(k >= calls, 1.0, cdf[np.arange(base.size), np.clip(k, 0, calls)])
    below = within.prod(axis=1)
    return top + float(((1.0 - below[:-1]) * np.diff(xs)).sum())


def _equal_shares(limits: np.ndarray, total: float) -> np.ndarray:
    """``total`` split equally, no share above its limit, the excess split among the rest."""
    order = np.argsort(limits)
    lim = limits[order]
    n = lim.size
    # the level is the first limit that all above it, at that level, would overfill
    below = np.concatenate(([0.0], np.cumsum(lim)[:-1]))
    over = below + lim * (n - np.arange(n)) >= total
    i = int(np.argmax(over)) if over.any() else n - 1
    level = (total - below[i]) / (n - i)
    shares = np.empty(n)
    shares[order] = np.minimum(lim, level)
    return shares


def exchange_time_us(fabric: Fabric, src, dst, nb, p: int) -> np.ndarray:
    """Per flow: its bytes at ``exchange_GBps`` where the same step also has the reverse
    flow (dst -> src: an exchange with one peer), else 0."""
    key = np.asarray(src, np.int64) * p + dst
    paired = np.isin(np.asarray(dst, np.int64) * p + src, key)
    return np.where(paired, fabric.exchange_time_us(nb), 0.0)


def _tier(
    fabric: Fabric, finish, post, src, dst, nb, p: int, *, nic: bool, tail_nics: int | None = None
) -> None:
    """Flows of one tier: update ``finish`` in place with their end times (``tail_nics``
    as :func:`step_finish`'s)."""
    if nic:
        rate, alpha, incast = fabric.nic_GBps, fabric.nic_us, fabric.incast
    else:
        rate, alpha, incast = fabric.scaleup_GBps, fabric.scaleup_us, 0.0
    rate = rate * _BYTES_PER_US
    t_out = np.bincount(src, nb, p) / rate
    t_in = np.bincount(dst, nb, p) / rate
    timeouts = nic and fabric.loss_timeout_us > 0
    if incast and not timeouts:
        senders = np.bincount(dst, minlength=p)
        extra = np.maximum(senders - 1, 0)
        t_in = t_in * (1.0 + incast * extra * _overflow(fabric, t_in * rate, senders))
    duration = np.maximum(t_out[src], t_in[dst])
    if nic and (math.isfinite(fabric.fabric_GBps) or fabric.fabric_flows or fabric.fabric_tail):
        nics, at = np.unique(src, return_inverse=True)  # the sending NICs
        senders = nics.size
        per_nic = src.size / senders  # concurrent flows per sending NIC
        cap = fabric.cap_GBps(per_nic, nb.sum() / senders) * _BYTES_PER_US
        alone = np.zeros(senders)
        np.maximum.at(alone, at, duration)

        def stretch(m: int) -> float:
            return fabric.stretch(
                m if tail_nics is None else min(m, tail_nics), per_nic, nb.sum() / senders
            )

        ends = shared_cap_us(np.bincount(at, nb, senders), alone, cap,
                             stretch if fabric.fabric_tail else None)  # fmt: skip
        duration = np.maximum(duration, ends[at])
    if nic and math.isfinite(fabric.exchange_GBps):
        duration = np.maximum(duration, exchange_time_us(fabric, src, dst, nb, p))
    if not nic and fabric.scaleup_peer_GBps < fabric.scaleup_GBps:
        duration = np.maximum(duration, nb / (fabric.scaleup_peer_GBps * _BYTES_PER_US))
    end = np.maximum(post[src], post[dst]) + alpha + duration
    np.maximum.at(finish, src, end)
    np.maximum.at(finish, dst, end)
    if timeouts:
        ports = port_stalls(fabric, src, dst, nb, p)
        chance = late_chance(fabric, src, dst, nb, p, ports)
        late = chance > 0
        if late.any():  # the ranks that may pay shift alike, so the slowest is expected
            by = late_by(fabric, src, dst, end, finish, ports)
            calls = fabric.calls_averaged
            shift = expected_slowest(finish, chance, by, calls) - finish[late].max()
            finish[late] += min(shift, fabric.loss_timeout_us * late_share(chance, calls))
