"""Transports: ``cpu`` (numpy + mpi4py), ``cuda`` (cupy + NCCL), ``rocm`` (cupy + RCCL).

See :mod:`commbench.kernels.transport` for the interface the algorithms use.
"""

from __future__ import annotations

from commbench.errors import UsageError
from commbench.harness.topology import Topology
from commbench.kernels.registry import BACKENDS, GPU_BACKENDS


def create_transport(name: str, topo: Topology):
    """The transport ``name`` for this rank; collective over ``topo.world``."""
    if name == "cpu":
        from commbench.harness.backends.cpu import CpuTransport

        return CpuTransport(topo)
    if name in GPU_BACKENDS:
        from commbench.harness.backends.gpu import GpuTransport

        return GpuTransport(topo, flavour=name)
    raise UsageError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")


def check_backend_available(name: str) -> None:
    """Fail early, on every rank alike, when the backend cannot run here."""
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name == "cpu":
        return
    from commbench.harness.backends.gpu import gpu_unavailable_reason

    reason = gpu_unavailable_reason(name)
    if reason:
        extra = "cuda" if name == "cuda" else "rocm"
        raise UsageError(
            f"--backend {name} cannot run here: {reason} "
            f"(install with `pip install -e .[{extra}]` on a GPU machine, or use --backend cpu)"
        )
