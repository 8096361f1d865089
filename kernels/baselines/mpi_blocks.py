"""The MPI library's all-gather, reduce-scatter and broadcast through mpi4py's buffer calls
(``MPI_Allgather``, ``MPI_Reduce_scatter_block``, ``MPI_Bcast``), their buffer
specifications made once per case in ``setup``. Device buffers go to MPI directly or are
staged through host memory as :mod:`commbench.kernels.baselines.mpi` decides.

In place, MPI's and nccl-tests' layouts differ where ``MPI_IN_PLACE`` does: an in-place
``MPI_Reduce_scatter_block`` leaves the result in block 0 of the buffer, nccl-tests (and
``recv`` here) in block ``rank``, so the call is followed by one local copy of a block
(``info()`` says so); an out-of-place broadcast copies the root's send buffer into its
receive buffer before ``MPI_Bcast``, which has one buffer.
"""

from __future__ import annotations

import numpy as np

from commbench.kernels.baselines.mpi import GPU_DTYPES, _Mpi
from commbench.kernels.cases import BlockCase
from commbench.kernels.registry import register


def _byte_spec(buf) -> list:
    from mpi4py import MPI

    return [buf.view(np.uint8), MPI.BYTE]


@register("allgather", "mpi", capturable=False)
class MpiAllgather(_Mpi):
    """MPI_Allgather on bytes; in place with MPI_IN_PLACE."""

    COLLECTIVE = "allgather"

    def setup(self, case: BlockCase) -> None:
        from mpi4py import MPI

        send, recv = self.buffers.bind(case.send, case.recv)
        in_place = case.inplace and not self.buffers.staged
        self._send = MPI.IN_PLACE if in_place else _byte_spec(send)
        self._recv = _byte_spec(recv)
        self._bind_native(case)

    def run(self, case: BlockCase) -> None:
        self.buffers.before()
        self.transport.topo.world.Allgather(self._send, self._recv)
        self.buffers.after()


@register("reducescatter", "mpi", gpu_dtypes=GPU_DTYPES, capturable=False)
class MpiReduceScatter(_Mpi):
    """MPI_Reduce_scatter_block; fp16/bf16 through a user-defined reduction on cpu."""

    COLLECTIVE = "reducescatter"

    def setup(self, case: BlockCase) -> None:
        from mpi4py import MPI

        datatype, self._op = self._type_and_op(case)
        send, recv = self.buffers.bind(case.send, case.recv)
        # in place: the result lands in block 0 and moves to block rank after the call
        self._move = case.inplace and not self.buffers.staged
        if self._move:
            self._send, self._recv = MPI.IN_PLACE, [send, case.count, datatype]
            self._block0 = case.send[: case.count]
            self._moved = case.rank != 0 and case.count > 0
        else:
            self._send, self._recv = [send, datatype], [recv, datatype]
            self._moved = False
        if case.inplace:  # a call is the library's plus the move: timed from Python
            self._native, self._loop_why = None, "in place: each call also moves its block"
        else:
            self._bind_native(case)

    def run(self, case: BlockCase) -> None:
        self.buffers.before()
        self.transport.topo.world.Reduce_scatter_block(self._send, self._recv, op=self._op)
        if self._moved:
            self.transport.copy(case.recv, self._block0)
        self.buffers.after()

    def info(self) -> dict:
        extra = {"in_place_copy": "result moved from block 0 to block rank"} if self._move else {}
        return {**super().info(), **extra}


@register("broadcast", "mpi", capturable=False)
class MpiBroadcast(_Mpi):
    """MPI_Bcast on bytes; out of place, the root first copies send to recv."""

    COLLECTIVE = "broadcast"

    def setup(self, case: BlockCase) -> None:
        self._send, recv = self.buffers.bind(case.send, case.recv)
        self._recv = recv
        self._spec = _byte_spec(recv)
        self._copy = case.rank == case.root and (not case.inplace or self.buffers.staged)
        if case.inplace:
            self._bind_native(case)
        else:  # the root's copy is part of each call: timed from Python on every rank
            self._native, self._loop_why = None, "out of place: the root copies first"

    def run(self, case: BlockCase) -> None:
        staged = self.buffers.staged
        if self._copy and not staged:
            self.transport.copy(self._recv, self._send)
        self.buffers.before()
        if self._copy and staged:  # the host copies: send's was filled by before()
            np.copyto(self._recv, self._send)
        self.transport.topo.world.Bcast(self._spec, root=case.root)
        self.buffers.after()
