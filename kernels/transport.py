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

from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType
from typing import Any, Protocol

Array = Any  # numpy.ndarray on cpu, cupy.ndarray on GPU backends
Group = str  # "world" | "node" | "rail"
#: Messages as byte ranges of a list of byte buffers, four parallel lists: per message its
#: peer, the index of its buffer, and the [start, end) of its bytes there
Ranges = tuple[Sequence[int], Sequence[int], Sequence[int], Sequence[int]]


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


class Plan(Protocol):
    """Posts bound once (:func:`bind_posts`) and started many times."""

    group: Group

    def start(self) -> Pending:
        """Post the bound sends and receives (as :meth:`Transport.start` would)."""
        ...

    def run(self) -> None:
        """``start().wait()``."""
        ...


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

    def barrier(self, group: Group = "world") -> None:
        """Host barrier over ``group``."""
        ...

    def synchronize(self) -> None:
        """Wait for all work queued on the device (no-op on cpu)."""
        ...

    def now(self) -> float:
        """Host time in seconds (call :meth:`synchronize` first on GPU backends)."""
        ...


class Replay:
    """Posts bound once and handed to ``transport.start`` at each start: the plan of a
    transport with no persistent point-to-point (NCCL, RCCL, the test transports)."""

    def __init__(self, transport, sends, recvs, group: Group = "world") -> None:
        self.transport, self.sends, self.recvs, self.group = transport, sends, recvs, group

    def start(self) -> Pending:
        return self.transport.start(self.sends, self.recvs, self.group)

    def run(self) -> None:
        self.start().wait()


def bind_posts(
    transport,
    sends: Sequence[tuple[int, Array]],
    recvs: Sequence[tuple[int, Array]],
    group: Group = "world",
) -> Plan:
    """A :class:`Plan` of these posts: persistent requests where the transport has them
    (``transport.plan``: MPI ``Send_init``/``Recv_init``, started together), else a
    :class:`Replay`. Bind in ``setup`` what every call posts the same way, so a call pays
    one start and one wait instead of one Python call per message. The buffers must
    outlive the plan."""
    make = getattr(transport, "plan", None)
    return make(sends, recvs, group) if make is not None else Replay(transport, sends, recvs, group)


def bind_copy(transport, dst: Array, src: Array) -> Callable[[], None]:
    """``transport.copy(dst, src)`` as a call of no arguments, bound once: the transport's
    cheaper form where it has one (``transport.bind_copy``: on ``cpu`` a copy between
    memoryviews, a fifth of ``numpy.copyto``'s host cost at small sizes). The arrays must
    outlive it."""
    make = getattr(transport, "bind_copy", None)
    return make(dst, src) if make is not None else partial(transport.copy, dst, src)


def slices(bufs: Sequence[Array], ranges: Ranges) -> list[tuple[int, Array]]:
    """``(peer, buffer slice)`` per message of ``ranges`` (what :meth:`Transport.start` takes)."""
    return [(p, bufs[k][x:y]) for p, k, x, y in zip(*ranges, strict=True)]


def start_ranges(
    transport, bufs: Sequence[Array], sends: Ranges, recvs: Ranges, group: Group = "world"
) -> Pending:
    """:meth:`Transport.start` of messages given as byte ranges of ``bufs`` (1-D byte
    arrays): where the transport can (``transport.start_ranges``) each message is posted
    from its buffer and offset - an MPI (buffer, count, displacement) or a device pointer
    plus the offset - with no array slice cut per message; else on :func:`slices`. For a
    plan made anew every call (``fast+sched``), where nothing can be bound ahead."""
    make = getattr(transport, "start_ranges", None)
    if make is not None:
        return make(bufs, sends, recvs, group)
    return transport.start(slices(bufs, sends), slices(bufs, recvs), group)
