"""A system profile's ``[fabric]`` table (``jobs/systems/NAME.toml``) as a validated model,
and its conversion into the cost model's per-GPU :class:`~commbench.kernels.model.fabric.Fabric`.

It lives here, at the bottom of the package, because the cost model reads it (the rest
of the profile is :class:`commbench.jobs.profile.Profile`), and apart from
:mod:`commbench.kernels.model.fabric` so that the cost model, and what imports it, does not
load pydantic.
"""

from __future__ import annotations

import math
from typing import Literal

import pydantic
from pydantic import BaseModel, Field

from commbench.kernels.model.fabric import Fabric

#: TOML tables as pydantic models: unknown keys are errors, values are never coerced
#: between types (a quoted number stays an error), a parsed table is immutable.
STRICT = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


class FabricTable(BaseModel):
    """``[fabric]`` of a system profile: its interconnect's constants.

    Bandwidths are usable payload GB/s (1e9 bytes) per direction; latencies are the
    per-message start-up cost (alpha) in microseconds.

    - ``scaleup_GBps``: one GPU to the other GPUs of its node, all links together;
      ``scaleup_peer_GBps``: one GPU to one peer (equal to it behind a switch);
      0 for both when a node has one GPU (no scale-up tier).
    - ``scaleout_GBps``: one NIC (``nics_per_node`` of them per node, rail-aligned
      when there is one per GPU).
    - ``stage_cost_us``: fixed cost of one FAST stage (synchronisation and launch).
    - optional mechanisms (``None``: the model's default): ``msg_us`` (host cost per
      posted message), ``proxy_us`` (one pass through NCCL/RCCL's network proxy thread),
      ``put_us`` (one NVSHMEM put through its transport), ``reduce_GBps``;
      ``butterfly_step_us`` / ``butterfly_call_us`` (a host-driven butterfly's step across
      nodes, posts, partner and latency, and what its call pays once: how late the ranks
      come and the slowest one's end; measured by ``commbench calibrate``; None: a step
      costs ``stage_cost_us``, two posts and a latency); ``ring_step_us`` /
      ``ring_call_us`` (the same for a host-driven ring's step, on either tier;
      measured by ``commbench calibrate``; None: an empty round, two posts and the
      link's latency);
      ``scaleout_latency_quiet_us`` (the latency between nodes with one pair of ranks
      exchanging, the others waiting, where ``scaleout_latency_us`` is every rank's at
      once: ranks that share cores pay more the more of them exchange; measured by
      ``commbench calibrate``; None: ``scaleout_latency_us`` however many exchange);
      ``switch_buffer_MB`` (a receiving port's share of the switch buffer) with
      ``incast_lossless`` / ``incast_lossy`` (loss per extra sender once it overflows)
      and ``flow_control`` naming which of the two the fabric runs; ``nccl_ll128``
      (false where NCCL disables its LL128 protocol: GPU-NIC path through the CPU);
      ``fabric_GBps`` (the bytes all NICs together move through the switch per second,
      where that is below their sum: measured by ``commbench calibrate``) and
      ``fabric_flows_GBps`` (``[[flows per NIC, GB/s], ...]``: that rate by the number of
      concurrent flows each NIC carries, where it changes with them), both the NICs'
      throughput where ``fabric_tail`` is set (``[[flows per NIC, stretch, bytes], ...]``:
      how much later the slowest of the NICs sending at once ends than the median one,
      per doubling of their number, measured by ``commbench calibrate``); ``exchange_GBps``
      (one direction of an exchange with one peer, both directions at once, where that is
      below a one-way flow's rate: measured by ``commbench calibrate``) and
      ``put_exchange_GBps`` (the same for one-sided puts of cells, NVRAR's cpu steps);
      ``scaleout_burst_bytes`` (what one NIC passes at once after an idle spell before
      its rate applies: a token bucket's depth, measured by ``commbench calibrate``
      where a NIC is shaped by one, as the emulated cluster's are);
      ``scaleup_eager_bytes`` / ``scaleout_eager_bytes`` (the largest message a host's
      MPI sends without waiting for its receiver on that tier: its eager limit, measured
      by ``commbench calibrate``; None: every message waits for its receiver);
      ``scaleout_send_buffer_bytes`` (bytes of a message between nodes still on their way
      when the host's send returns: socket and NIC queue, measured by ``commbench
      calibrate``; None: a send returns when its bytes have arrived) and
      ``scaleout_queue_bytes`` (what such a message has queued on its NIC once its first
      fragment is through: the window its sender's kernel holds then, which opens by
      every byte sent after, up to the send buffer); ``loss_timeout_us`` (what a round of loss recovery costs where a switch
      port drops: a retransmission timeout, measured by ``commbench calibrate`` on a lossy
      fabric; used in the ``lossy`` case only, in place of ``incast_lossy``'s multiplier)
      and ``loss_late`` (``[[senders, chance, bytes per NIC], ...]``: the chance that a
      NIC taking that many senders at once pays one, measured with it; none: every such
      step pays one) and ``loss_overfill`` (``[[senders, chance, bytes], ...]``: the
      chance that a NIC that many senders overfill for that many bytes pays one; none:
      charged as ``loss_late`` has it).
    - ``sources``: for each constant, where its value comes from (a published
      measurement, a vendor spec, or "estimate: ..."); ``[fabric.sources]``.
    """

    model_config = STRICT

    scaleup: str
    scaleup_GBps: float = Field(ge=0)
    scaleup_peer_GBps: float = Field(ge=0)
    scaleup_latency_us: float = Field(ge=0)
    scaleout: str
    scaleout_GBps: float = Field(ge=0)
    scaleout_latency_us: float = Field(ge=0)
    scaleout_latency_quiet_us: float | None = Field(None, ge=0)
    nics_per_node: int = Field(ge=1)
    stage_cost_us: float = Field(ge=0)
    msg_us: float | None = Field(None, ge=0)
    proxy_us: float | None = Field(None, ge=0)
    put_us: float | None = Field(None, ge=0)
    butterfly_step_us: float | None = Field(None, ge=0)
    butterfly_call_us: float | None = Field(None, ge=0)
    ring_step_us: float | None = Field(None, ge=0)
    ring_call_us: float | None = Field(None, ge=0)
    reduce_GBps: float | None = Field(None, ge=0)
    switch_buffer_MB: float | None = Field(None, ge=0)
    incast_lossless: float | None = Field(None, ge=0)
    incast_lossy: float | None = Field(None, ge=0)
    flow_control: Literal["lossless", "lossy"] | None = None
    nccl_ll128: bool | None = None
    fabric_GBps: float | None = Field(None, gt=0)
    fabric_flows_GBps: list[list[float]] | None = None
    fabric_tail: list[list[float]] | None = None
    exchange_GBps: float | None = Field(None, gt=0)
    put_exchange_GBps: float | None = Field(None, gt=0)
    scaleout_burst_bytes: float | None = Field(None, ge=0)
    scaleup_eager_bytes: float | None = Field(None, ge=0)
    scaleout_eager_bytes: float | None = Field(None, ge=0)
    scaleout_send_buffer_bytes: float | None = Field(None, ge=0)
    scaleout_queue_bytes: float | None = Field(None, ge=0)
    loss_timeout_us: float | None = Field(None, ge=0)
    loss_late: list[list[float]] | None = None
    loss_overfill: list[list[float]] | None = None
    sources: dict[str, str] = {}

    def per_gpu(
        self,
        node_gpus: int,
        gpus_per_node: int | None = None,
        flow_control: str | None = None,
        **overrides: float | None,
    ) -> Fabric:
        """The cost model's :class:`Fabric` of this table on nodes of ``node_gpus`` GPUs
        (the profile's), modelled with ``gpus_per_node`` of them (default: all).

        The table gives ``scaleout_GBps`` per NIC and ``nics_per_node`` NICs; the model has
        one NIC per GPU, so a GPU's share is ``scaleout_GBps * nics_per_node / node_gpus``.
        With one GPU per node there is no scale-up tier (its constants are not used).
        ``incast`` is ``incast_<flow_control>`` (default: the table's ``flow_control``).
        ``overrides`` replace constants of the :class:`Fabric` (None: not replaced).
        ``ValueError`` on a bad value or a missing incast case.
        """
        g = node_gpus if gpus_per_node is None else gpus_per_node
        up, peer = self.scaleup_GBps, self.scaleup_peer_GBps
        if g == 1 and not up:
            up = peer = math.inf
        values = {
            "gpus_per_node": g,
            "nic_GBps": self.scaleout_GBps * self.nics_per_node / node_gpus,
            "nic_us": self.scaleout_latency_us,
            "scaleup_GBps": up,
            "scaleup_peer_GBps": peer,
            "scaleup_us": self.scaleup_latency_us,
            "stage_us": self.stage_cost_us,
        }
        optional = ("msg_us", "reduce_GBps", "proxy_us", "put_us", "switch_buffer_MB",
                    "nccl_ll128", "fabric_GBps", "exchange_GBps", "put_exchange_GBps",
                    "butterfly_step_us", "butterfly_call_us", "ring_step_us",
                    "ring_call_us")  # fmt: skip
        values.update({k: getattr(self, k) for k in optional if getattr(self, k) is not None})
        if self.scaleout_latency_quiet_us is not None:
            values["nic_quiet_us"] = self.scaleout_latency_quiet_us
        if self.scaleout_burst_bytes is not None:
            values["nic_burst_bytes"] = self.scaleout_burst_bytes * self.nics_per_node / node_gpus
        if self.scaleup_eager_bytes is not None:
            values["scaleup_eager_bytes"] = self.scaleup_eager_bytes
        if self.scaleout_eager_bytes is not None:
            values["nic_eager_bytes"] = self.scaleout_eager_bytes
        if self.scaleout_send_buffer_bytes is not None:
            values["nic_send_buffer_bytes"] = self.scaleout_send_buffer_bytes
        if self.scaleout_queue_bytes is not None:
            values["nic_queue_bytes"] = self.scaleout_queue_bytes
        if self.fabric_flows_GBps is not None:
            values["fabric_flows"] = tuple(tuple(pair) for pair in self.fabric_flows_GBps)
        if self.fabric_tail is not None:
            values["fabric_tail"] = tuple(tuple(row) for row in self.fabric_tail)
        case = flow_control or self.flow_control
        if case == "lossy" and self.loss_timeout_us is not None:
            values["loss_timeout_us"] = self.loss_timeout_us
            if self.loss_late is not None:
                values["loss_late"] = tuple(tuple(row) for row in self.loss_late)
            if self.loss_overfill is not None:
                values["loss_overfill"] = tuple(tuple(row) for row in self.loss_overfill)
        if case is not None:
            coefficient = getattr(self, f"incast_{case}", None)
            if coefficient is None:
                raise ValueError(
                    f"[fabric] has no incast_{case}: add it (with its source) or choose the "
                    "other flow control"
                )
            values["incast"] = coefficient
        values.update({k: v for k, v in overrides.items() if v is not None})
        return Fabric(**values)


#: The ``[fabric]`` keys that hold a constant, each with its source in ``[fabric.sources]``.
FABRIC_CONSTANTS = tuple(
    k for k in FabricTable.model_fields if k not in ("scaleup", "scaleout", "sources")
)
