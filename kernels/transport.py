"""The transport interface every algorithm is written against.

One algorithm, several transports: ``commbench.harness.backends`` provides ``cpu`` (numpy + mpi4py),
``cuda`` (cupy + NCCL through ``cupy.cuda.nccl``) and ``rocm`` (cupy's ROCm build + RCCL).
Algorithms only use what is listed here, so the CPU tests cover everything but the thin
layer that moves bytes.

Groups: ``"world"`` (all ranks, in topology order: rank = node * G + local), ``"node"``
(the G ranks of this node, indexed by local index) and ``"rail"`` (the N ranks with this
local index, indexed by node). Peers passed to :meth:`Transport.start` are ranks *in that
group*.

Arrays are 1-D, contiguous, of the backend's array type (``transport.xp``); slices of a
larger 1-D buffer are fine. Point-to-point moves bytes, so any dtype works (bf16 too).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, Protocol

Array = Any  # numpy.ndarray on cpu, cupy.ndarray on GPU backends
Group = str  # "world" | "node" | "rail"


class Pending(Protocol):
    def wait(self) -> None:
        """Block until every send and receive of the posted group has completed."""


class Topology(Protocol):
    rank: int  # rank in the world group (node * gpus_per_node + local)
    size: int
    nodes: int
    gpus_per_node: int
    node: int
    local: int
    world: Any  # mpi4py communicators, built once
    node_comm: Any
    rail_comm: Any


class Transport(Protocol):
    name: str  # "cpu" | "cuda" | "rocm"
    xp: ModuleType  # numpy or cupy
    topo: Topology

    def empty(self, count: int, dtype: Any) -> Array: ...

    def zeros(self, count: int, dtype: Any) -> Array: ...

    def start(
        self,
        sends: Sequence[tuple[int, Array]],
        recvs: Sequence[tuple[int, Array]],
        group: Group = "world",
    ) -> Pending:
        """Post all sends and receives at once (one NCCL group; MPI Isend/Irecv).

        A send or receive to oneself is allowed. Messages between the same pair in the
        same group are matched in posting order.
        """
        ...

    def exchange(
        self,
        sends: Sequence[tuple[int, Array]],
        recvs: Sequence[tuple[int, Array]],
        group: Group = "world",
    ) -> None:
        """``start(sends, recvs, group).wait()``."""
        ...

    def copy(self, dst: Array, src: Array) -> None:
        """Local copy (a device copy on the transport's stream on GPU backends)."""
        ...

    def allreduce(self, send: Array, recv: Array, op: str = "sum", group: Group = "world") -> None:
        """The library's all-reduce (MPI_Allreduce, ncclAllReduce)."""
        ...

    def reduce_scatter(
        self, send: Array, recv: Array, op: str = "sum", group: Group = "node"
    ) -> None:
        """Block reduce-scatter: ``send.size == recv.size * group size``."""
        ...

    def allgather(self, send: Array, recv: Array, group: Group = "node") -> None:
        """Block all-gather: ``recv.size == send.size * group size``."""
        ...

    def broadcast(self, send: Array, recv: Array, root: int = 0, group: Group = "world") -> None:
        """The library's broadcast (MPI_Bcast, ncclBroadcast): ``root``'s ``send`` to every
        ``recv`` (``send`` may be ``recv``)."""
        ...

    def barrier(self) -> None:
        """Host barrier over the world group."""
        ...

    def synchronize(self) -> None:
        """Wait for all work queued on the device (no-op on cpu)."""
        ...

    def now(self) -> float:
        """Host time in seconds (call :meth:`synchronize` first on GPU backends)."""
        ...
