"""Emulated fabrics as data: ``jobs/emulated/NAME.toml``.

Each profile scales a real system's tier ratio down to this machine: the NIC rate is the
shared-memory rate measured at ``up`` divided by ``tier_ratio`` (capped by
``max_nic_mbit``, what the CPUs can shape and carry). Keys: ``description``,
``based_on`` (a ``jobs/systems`` profile, optional), ``nodes``, ``ranks_per_node``,
``tier_ratio``, ``latency_us``, ``switch_queue``, ``max_nic_mbit``, ``stage_cost_us`` (the fixed cost of one
synchronised round of TCP exchanges here, measured; FAST's scheduler and the cost model
take it), ``tcp_congestion`` (the ranks' TCP congestion control, cubic by default: never
the host's own default, which differs between machines).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from pydantic import BaseModel, Field

from commbench.cluster.plan import DEFAULT_TCP_CONGESTION, ClusterSpec
from commbench.config import STRICT, load_toml, parse
from commbench.errors import UsageError

#: the emulated fabrics shipped with commbench (the repository's ``jobs/emulated``)
EMULATED_DIR = Path(str(files("commbench.jobs.data"))) / "emulated"
#: above this the 2-core machine, not the token bucket, sets the rate: measured with 8
#: ranks, aggregate TCP through the switch stalls near 100 MB/s when the cores are shared
DEFAULT_MAX_NIC_MBIT = 100.0


class EmulatedProfile(BaseModel):
    """One ``jobs/emulated/NAME.toml`` (``name`` is the file's stem)."""

    model_config = STRICT

    name: str
    description: str
    nodes: int = Field(ge=1)
    ranks_per_node: int = Field(ge=1)
    tier_ratio: float = Field(gt=1)
    latency_us: float = Field(0.0, ge=0)
    switch_queue: int = Field(1000, ge=1)
    max_nic_mbit: float = Field(DEFAULT_MAX_NIC_MBIT, gt=0)
    stage_cost_us: float = Field(0.0, ge=0)
    tcp_congestion: str = DEFAULT_TCP_CONGESTION
    based_on: str | None = None

    def cluster_spec(self, prefix: str, nodes: int, ranks_per_node: int, nic_mbit: float,
                     **given) -> ClusterSpec:  # fmt: skip
        """The cluster of this fabric (its queue, latency, TCP and name) in that shape;
        ``given`` adds or overrides ClusterSpec fields (``shm_GBps``, ``tcp_congestion``...)."""
        fabric = dict(latency_us=self.latency_us, switch_queue=self.switch_queue,
                      profile=self.name, tcp_congestion=self.tcp_congestion)  # fmt: skip
        return ClusterSpec(prefix=prefix, nodes=nodes, ranks_per_node=ranks_per_node,
                           nic_mbit=nic_mbit, **{**fabric, **given})  # fmt: skip

    def nic_mbit(self, shm_GBps: float) -> float:
        """The NIC rate for a measured shared-memory rate (GB/s)."""
        return round(min(shm_GBps * 8e3 / self.tier_ratio, self.max_nic_mbit), 1)


def profile_names(folder: Path = EMULATED_DIR) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.toml"))


def load_emulated_profile(name: str, folder: Path = EMULATED_DIR) -> EmulatedProfile:
    path = folder / f"{name}.toml"
    if "/" in name or not path.is_file():
        raise UsageError(
            f"unknown emulated profile {name!r}: choose one of {', '.join(profile_names(folder))}"
        )
    data = load_toml(path)
    if "name" in data:
        raise UsageError(f"{path}: unknown key(s) name (the file name is the profile's name)")
    return parse(EmulatedProfile, data, str(path), name=name)
