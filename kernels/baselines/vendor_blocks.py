"""The vendor libraries' all-gather, reduce-scatter and broadcast: NCCL (``cuda``) and RCCL
(``rocm``) via ``cupy.cuda.nccl`` (``allGather``, ``reduceScatter``, ``broadcast`` on the
world communicator). NCCL takes nccl-tests' in-place layouts as they are."""

from __future__ import annotations

from commbench.kernels.cases import BlockCase
from commbench.kernels.registry import register


class _Library:
    def __init__(self, transport, params: dict) -> None:
        self.transport = transport

    def setup(self, case: BlockCase) -> None:
        """Nothing to prepare: the communicator exists with the transport."""


class _Allgather(_Library):
    def run(self, case: BlockCase) -> None:
        self.transport.allgather(case.send, case.recv, group="world")


class _ReduceScatter(_Library):
    def run(self, case: BlockCase) -> None:
        self.transport.reduce_scatter(case.send, case.recv, case.op, group="world")


class _Broadcast(_Library):
    def run(self, case: BlockCase) -> None:
        self.transport.broadcast(case.send, case.recv, case.root, group="world")


@register("allgather", "nccl", backends=("cuda",))
class NcclAllgather(_Allgather):
    """ncclAllGather through cupy.cuda.nccl."""


@register("reducescatter", "nccl", backends=("cuda",))
class NcclReduceScatter(_ReduceScatter):
    """ncclReduceScatter through cupy.cuda.nccl."""


@register("broadcast", "nccl", backends=("cuda",))
class NcclBroadcast(_Broadcast):
    """ncclBroadcast through cupy.cuda.nccl."""


@register("allgather", "rccl", backends=("rocm",))
class RcclAllgather(_Allgather):
    """RCCL's allGather through CuPy's ROCm build of cupy.cuda.nccl."""


@register("reducescatter", "rccl", backends=("rocm",))
class RcclReduceScatter(_ReduceScatter):
    """RCCL's reduceScatter through CuPy's ROCm build of cupy.cuda.nccl."""


@register("broadcast", "rccl", backends=("rocm",))
class RcclBroadcast(_Broadcast):
    """RCCL's broadcast through CuPy's ROCm build of cupy.cuda.nccl."""
