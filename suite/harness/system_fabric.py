"""FAST's stage cost from the run's system profile (``commbench run --system``).

``fast`` and ``fast+sched`` choose their stage count from ``stage_cost_bytes`` (what one
stage's fixed cost is worth in bytes of one NIC). When the run names its system (``--system
NAME`` of a shipped profile, ``--system PATH.toml`` such as ``commbench calibrate``
writes, or ``$COMMBENCH_SYSTEM`` as jobs export it), the profile's ``[fabric]`` gives it;
the record's ``info.stage_cost`` says where it came from. An explicit ``--param
stage_cost_bytes=`` always wins. Only the ``[fabric]`` and ``[devices]`` tables are
read here (the harness sits below the job layer that parses whole profiles).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from commbench.config import load_toml
from commbench.errors import UsageError

#: implementations whose scheduler takes ``stage_cost_bytes``
STAGE_COST_IMPLS = ("fast", "fast+sched")


def is_profile_path(system: str) -> bool:
    """``system`` names a profile file (``PATH.toml``, e.g. ``commbench calibrate``'s), not
    a shipped profile."""
    return system.endswith(".toml") or "/" in system


def profile_file(system: str) -> Path | None:
    """The profile file of ``system``: a path (``*.toml`` or with a ``/``; must exist) or
    a shipped profile's name (None when there is no such profile, e.g. a free-form name)."""
    if is_profile_path(system):
        path = Path(system)
        if not path.is_file():
            raise UsageError(f"--system {system}: no such profile file (give a NAME.toml "
                             "that `commbench calibrate` wrote, or a shipped name)")  # fmt: skip
        return path
    path = Path(str(files("commbench.jobs.data"))) / "systems" / f"{system}.toml"
    return path if path.is_file() else None


def profile_fabric(system: str | None) -> tuple | None:
    """``(FabricTable, the profile's GPUs per node, path)`` of ``system``'s profile, or
    None when no system was named or it names no profile. ``UsageError`` on a bad
    profile file."""
    from commbench.kernels.model.fabric_table import FabricTable

    path = profile_file(system) if system else None
    if path is None:
        return None
    data = load_toml(path)
    try:
        table = FabricTable(**data["fabric"])
        node_gpus = int(data["devices"]["gpus_per_node"])
        table.per_gpu(node_gpus)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"--system {system}: {path} has no valid [fabric]/[devices]: {exc}"
        ) from None
    return table, node_gpus, path


def stage_cost(system: str | None) -> dict | None:
    """``{"bytes", "stage_cost_us", "source"}`` from ``system``'s profile, or None when
    no system was named or it names no profile. ``UsageError`` on a bad profile file."""
    found = profile_fabric(system)
    if found is None:
        return None
    table, node_gpus, path = found
    fabric = table.per_gpu(node_gpus)
    return {
        "bytes": fabric.stage_cost_bytes,
        "stage_cost_us": fabric.stage_us,
        "source": f"system profile {path}: (stage_cost_us {fabric.stage_us:g} + "
        f"scaleout_latency_us {fabric.nic_us:g}) x {fabric.nic_GBps:g} GB/s per NIC"
        + (f" [{table.sources['stage_cost_us']}]" if "stage_cost_us" in table.sources else ""),
    }
