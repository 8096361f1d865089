"""Emulated fabrics as data: ``jobs/emulated/NAME.toml``.

Each profile scales a real system's tier ratio down to this machine: the NIC rate is the
shared-memory rate measured at ``up`` divided by ``tier_ratio`` (capped by
``max_nic_mbit``, what the CPUs can shape and carry). Keys: ``description``,
``based_on`` (a ``jobs/systems`` profile, optional), ``nodes``, ``ranks_per_node``,
``tier_ratio``, ``latency_us``, ``switch_queue``, ``max_nic_mbit``, ``stage_cost_us`` (the fixed cost of one
synchronised round of TCP exchanges here, measured; FAST's scheduler and the cost model
take it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suite.errors import UsageError

EMULATED_DIR = Path(__file__).resolve().parents[2] / "jobs" / "emulated"
#: above this the 2-core machine, not the token bucket, sets the rate: measured with 8
#: ranks, aggregate TCP through the switch stalls near 100 MB/s when the cores are shared
DEFAULT_MAX_NIC_MBIT = 100.0
_KEYS = {
    "description", "based_on", "nodes", "ranks_per_node", "tier_ratio", "latency_us",
    "switch_queue", "max_nic_mbit", "stage_cost_us",
}  # fmt: skip


@dataclass(frozen=True)
class EmulatedProfile:
    name: str
    description: str
    nodes: int
    ranks_per_node: int
    tier_ratio: float
    latency_us: float = 0.0
    switch_queue: int = 1000
    max_nic_mbit: float = DEFAULT_MAX_NIC_MBIT
    stage_cost_us: float = 0.0
    based_on: str | None = None

    def nic_mbit(self, shm_GBps: float) -> float:
        """The NIC rate for a measured shared-memory rate (GB/s)."""
        return round(min(shm_GBps * 8e3 / self.tier_ratio, self.max_nic_mbit), 1)


def profile_names(folder: Path = EMULATED_DIR) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.toml"))


def load_emulated_profile(name: str, folder: Path = EMULATED_DIR) -> EmulatedProfile:
    from suite.jobs import load_toml

    path = folder / f"{name}.toml"
    if "/" in name or not path.is_file():
        raise UsageError(
            f"unknown emulated profile {name!r}: choose one of {', '.join(profile_names(folder))}"
        )
    data = load_toml(path)
    unknown = set(data) - _KEYS
    if unknown:
        raise UsageError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    try:
        prof = EmulatedProfile(name=name, **data)
    except TypeError as exc:
        raise UsageError(f"{path}: {exc}") from None
    if not prof.tier_ratio > 1 or not prof.max_nic_mbit > 0:
        raise UsageError(f"{path}: tier_ratio must be > 1 and max_nic_mbit > 0")
    return prof
