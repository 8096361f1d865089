"""The vendor libraries' all-reduce: NCCL (``cuda``) and RCCL (``rocm``) via ``cupy.cuda.nccl``.

The algorithm is NCCL's own choice unless ``NCCL_ALGO`` / ``NCCL_PROTO`` force one.
"""

from __future__ import annotations

from commbench.kernels.cases import AllreduceCase
from commbench.kernels.registry import register


class _LibraryAllreduce:
    def __init__(self, transport, params: dict) -> None:
        self.transport = transport

    def setup(self, case: AllreduceCase) -> None:
        """Nothing to prepare: the communicator exists with the transport."""

    def run(self, case: AllreduceCase) -> None:
        self.transport.allreduce(case.send, case.recv, case.op)


@register("allreduce", "nccl", backends=("cuda",))
class NcclAllreduce(_LibraryAllreduce):
    """ncclAllReduce through cupy.cuda.nccl."""


@register("allreduce", "rccl", backends=("rocm",))
class RcclAllreduce(_LibraryAllreduce):
    """RCCL's allReduce through CuPy's ROCm build of cupy.cuda.nccl."""
