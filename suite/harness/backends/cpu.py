"""The reference transport: numpy buffers, mpi4py point-to-point and collectives."""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
from mpi4py import MPI

from commbench.harness.topology import Topology
from commbench.kernels.mpitypes import mpi_type_and_op


def _bytes(a: np.ndarray) -> list:
    return [a.view(np.uint8), MPI.BYTE]


def _view(a: np.ndarray) -> memoryview:
    """The bytes of a contiguous array as a flat memoryview (any dtype, bf16 too)."""
    return memoryview(a.view(np.uint8)).cast("B")


class _Requests:
    def __init__(self, requests: list[MPI.Request]) -> None:
        self._requests = requests

    def wait(self) -> None:
        MPI.Request.Waitall(self._requests)


class _Persistent:
    """MPI persistent requests for a fixed set of posts (sends first, as ``start``)."""

    def __init__(self, requests: list[MPI.Prequest], group: str) -> None:
        self._requests, self.group = requests, group

    def start(self) -> _Persistent:
        if self._requests:
            MPI.Prequest.Startall(self._requests)
        return self

    def wait(self) -> None:
        if self._requests:
            MPI.Request.Waitall(self._requests)

    def run(self) -> None:
        requests = self._requests  # start().wait() in one call: the run of every plan
        if requests:
            MPI.Prequest.Startall(requests)
            MPI.Request.Waitall(requests)


class CpuTransport:
    """numpy + MPI: what CI tests byte for byte, and what ``make run`` uses."""

    name = "cpu"
    xp = np

    def __init__(self, topo: Topology) -> None:
        self.topo = topo

    def describe(self) -> dict:
        return {"device": "cpu", "library": MPI.Get_library_version().splitlines()[0].strip()}

    def empty(self, count: int, dtype) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def zeros(self, count: int, dtype) -> np.ndarray:
        return np.zeros(count, dtype=dtype)

    def to_host(self, a: np.ndarray, dtype=None) -> np.ndarray:
        return a.view(dtype) if dtype is not None else a

    def from_host(self, a: np.ndarray) -> np.ndarray:
        return a

    def start(
        self,
        sends: Sequence[tuple[int, np.ndarray]],
        recvs: Sequence[tuple[int, np.ndarray]],
        group: str = "world",
    ) -> _Requests:
        """Post ``sends``, then ``recvs``. Sends go first because Open MPI's ob1 over TCP
        answers a rendezvous request with an ACK on the connection that carries its own
        data: a rank whose partner's request is already in (a partner ahead by a step)
        and that posted its receive first lets the partner start streaming, and the ACK
        for this rank's own send then waits behind that data, so the two directions of an
        exchange run one after the other. Posted sends-first, the request reaches the
        partner ahead of the ACK. On the emulated 8x1 cluster: recursive doubling at
        1 MiB 375-401 ms receives first, 302-336 ms sends first (docs/model-validation-history.md)."""
        comm = self.topo.group(group)
        reqs = [comm.Isend(_bytes(buf), dest=peer, tag=0) for peer, buf in sends]
        reqs += [comm.Irecv(_bytes(buf), source=peer, tag=0) for peer, buf in recvs]
        return _Requests(reqs)

    def start_ranges(self, bufs, sends, recvs, group: str = "world") -> _Requests:
        """:meth:`start` of byte ranges of ``bufs`` (``kernels.transport.start_ranges``):
        each message an MPI (buffer, count, displacement), no slice per message."""
        comm, byte = self.topo.group(group), MPI.BYTE
        reqs = [comm.Isend([bufs[k], y - x, x, byte], dest=p, tag=0)
                for p, k, x, y in zip(*sends, strict=True)]  # fmt: skip
        reqs += [comm.Irecv([bufs[k], y - x, x, byte], source=p, tag=0)
                 for p, k, x, y in zip(*recvs, strict=True)]  # fmt: skip
        return _Requests(reqs)

    def exchange(self, sends, recvs, group: str = "world") -> None:
        self.start(sends, recvs, group).wait()

    def plan(self, sends, recvs, group: str = "world") -> _Persistent:
        """The posts of :meth:`start` as persistent requests (see ``bind_posts``)."""
        comm = self.topo.group(group)
        reqs = [comm.Send_init(_bytes(buf), dest=peer, tag=0) for peer, buf in sends]
        reqs += [comm.Recv_init(_bytes(buf), source=peer, tag=0) for peer, buf in recvs]
        return _Persistent(reqs, group)

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def bind_copy(self, dst: np.ndarray, src: np.ndarray) -> Callable[[], None]:
        """:meth:`copy` bound once (``kernels.transport.bind_copy``): bytes between
        memoryviews (~0.1 µs a call against ``copyto``'s ~0.5 µs)."""
        if dst.nbytes != src.nbytes:
            raise ValueError(f"copy of {src.nbytes} bytes into {dst.nbytes}")
        whole = slice(None)
        return partial(operator.setitem, _view(dst), whole, _view(src))

    def allreduce(self, send, recv, op: str = "sum", group: str = "world") -> None:
        datatype, mpi_op = mpi_type_and_op(send.dtype, op)
        self.topo.group(group).Allreduce([send, datatype], [recv, datatype], op=mpi_op)

    def reduce_scatter(self, send, recv, op: str = "sum", group: str = "node") -> None:
        datatype, mpi_op = mpi_type_and_op(send.dtype, op)
        self.topo.group(group).Reduce_scatter_block([send, datatype], [recv, datatype], op=mpi_op)

    def allgather(self, send, recv, group: str = "node") -> None:
        self.topo.group(group).Allgather(_bytes(send), _bytes(recv))

    def broadcast(self, send, recv, root: int = 0, group: str = "world") -> None:
        comm = self.topo.group(group)
        if comm.rank == root and send is not recv:
            np.copyto(recv, send)
        comm.Bcast(_bytes(recv), root=root)

    def alltoallv(self, send, sendcounts, sdispls, recv, recvcounts, rdispls) -> None:
        """MPI_Alltoallv on byte buffers (counts and displacements in bytes)."""
        self.topo.world.Alltoallv(
            [send.view(np.uint8), (sendcounts, sdispls), MPI.BYTE],
            [recv.view(np.uint8), (recvcounts, rdispls), MPI.BYTE],
        )

    def barrier(self, group: str = "world") -> None:
        self.topo.group(group).Barrier()

    def synchronize(self) -> None:
        """Nothing is queued on a CPU."""

    def now(self) -> float:
        return time.perf_counter()

    def close(self) -> None:
        """Nothing to release beyond the topology's communicators."""
