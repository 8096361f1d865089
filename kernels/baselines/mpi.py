"""The MPI library's own collectives through mpi4py (``MPI_Allreduce``, ``MPI_Alltoall(v)``).

On GPU backends the device buffers go straight to MPI, which needs a CUDA/ROCm-aware MPI
(Cray MPICH with ``MPICH_GPU_SUPPORT_ENABLED=1``, Open MPI built with UCX/CUDA).
"""

from __future__ import annotations

import numpy as np

from kernels.cases import AllreduceCase, AlltoallvCase
from kernels.registry import register


@register("allreduce", "mpi")
class MpiAllreduce:
    """MPI_Allreduce (mpi4py), user-defined reduction for fp16/bf16 on the host."""

    def __init__(self, transport, params: dict) -> None:
        self.transport = transport

    def setup(self, case: AllreduceCase) -> None:
        from kernels.mpitypes import mpi_type_and_op

        if self.transport.name != "cpu" and case.dtype.itemsize == 2:
            raise ValueError(
                "MPI has no device reduction for 16-bit floats: use -d float32 with "
                "--impl mpi on a GPU backend"
            )
        self._datatype, self._op = mpi_type_and_op(case.dtype, case.op)
        self._comm = self.transport.topo.world

    def run(self, case: AllreduceCase) -> None:
        self.transport.synchronize()
        self._comm.Allreduce([case.send, self._datatype], [case.recv, self._datatype], op=self._op)


@register("alltoall", "mpi")
class MpiAlltoall:
    """MPI_Alltoall (mpi4py): equal blocks to every rank."""

    def __init__(self, transport, params: dict) -> None:
        self.transport = transport

    def setup(self, case: AlltoallvCase) -> None:
        from mpi4py import MPI

        counts = np.unique(case.traffic)
        if counts.size > 1:
            raise ValueError("alltoall needs uniform traffic: use alltoallv for a workload")
        self._byte = MPI.BYTE

    def run(self, case: AlltoallvCase) -> None:
        self.transport.synchronize()
        self.transport.topo.world.Alltoall([case.send, self._byte], [case.recv, self._byte])


@register("alltoallv", "mpi")
class MpiAlltoallv:
    """MPI_Alltoallv (mpi4py) on byte buffers."""

    def __init__(self, transport, params: dict) -> None:
        self.transport = transport

    def setup(self, case: AlltoallvCase) -> None:
        from mpi4py import MPI

        byte = MPI.BYTE
        self._send = [case.send, (case.sendcounts, case.sdispls), byte]
        self._recv = [case.recv, (case.recvcounts, case.rdispls), byte]

    def run(self, case: AlltoallvCase) -> None:
        self.transport.synchronize()
        self.transport.topo.world.Alltoallv(self._send, self._recv)
