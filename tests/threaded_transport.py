"""In-process ranks for executor tests: one thread per rank, a FIFO mailbox per
(group, source, destination), and an all-gather on a barrier.

:class:`ThreadTransport` follows :mod:`commbench.kernels.transport`'s contract (sends are eager
copies, a receive completes in ``wait`` with the oldest matching message, sizes must
agree) so the executors run unchanged; a hang becomes a ``TimeoutError`` naming the
receive that never matched.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from commbench.harness.topology import Layout

TIMEOUT_S = 10.0


class ThreadComm:
    """``allgather`` and ``barrier`` over the threads of one job."""

    def __init__(self, world: _World, rank: int) -> None:
        self._world, self.rank, self.size = world, rank, world.size

    def allgather(self, obj: Any) -> list:
        w = self._world
        w.slots[self.rank] = obj
        w.barrier.wait()
        out = list(w.slots)
        w.barrier.wait()
        return out

    def barrier(self) -> None:
        self._world.barrier.wait()


class _World:
    def __init__(self, size: int) -> None:
        self.size = size
        self.slots: list = [None] * size
        self.barrier = threading.Barrier(size, timeout=TIMEOUT_S)
        self._lock = threading.Lock()
        self.group_barriers: dict[tuple, threading.Barrier] = {}
        self.boxes = {
            (g, s, d): queue.Queue()
            for g in ("world", "node", "rail")
            for s in range(size)
            for d in range(size)
        }

    def group_barrier(self, key: tuple, parties: int) -> threading.Barrier:
        """The barrier of one node or rail (``key``), made by its first caller."""
        with self._lock:
            found = self.group_barriers.get(key)
            if found is None:
                found = self.group_barriers[key] = threading.Barrier(parties, timeout=TIMEOUT_S)
            return found

    def abort(self) -> None:
        self.barrier.abort()
        with self._lock:
            for b in self.group_barriers.values():
                b.abort()


@dataclass
class FakeTopo:
    rank: int
    size: int
    nodes: int
    gpus_per_node: int
    node: int
    local: int
    world: Any

    def to_world(self, group: str, peer: int) -> int:
        return Layout(self.rank, self.size, self.gpus_per_node).to_world(group, peer)


class _Pending:
    def __init__(self, boxes: list, recvs: list) -> None:
        self._boxes, self._recvs = boxes, recvs

    def wait(self) -> None:
        for (key, box), buf in zip(self._boxes, self._recvs, strict=True):
            try:
                data = box.get(timeout=TIMEOUT_S)
            except queue.Empty:
                raise TimeoutError(f"receive {key} never matched") from None
            if data.size != buf.size:
                raise RuntimeError(f"receive {key}: {data.size} bytes sent, {buf.size} expected")
            buf[...] = data


class ThreadTransport:
    """One rank's transport; ``posted`` counts sends and receives posted so far."""

    name = "cpu"
    xp = np

    def __init__(self, world: _World, rank: int, gpus_per_node: int) -> None:
        g = gpus_per_node
        self._world = world
        self.topo = FakeTopo(rank, world.size, world.size // g, g, rank // g, rank % g,
                             ThreadComm(world, rank))  # fmt: skip
        self.posted = 0
        self.barriers: dict[str, int] = {}

    def empty(self, count: int, dtype) -> np.ndarray:
        return np.empty(count, dtype=dtype)

    def zeros(self, count: int, dtype) -> np.ndarray:
        return np.zeros(count, dtype=dtype)

    def start(self, sends, recvs, group: str = "world") -> _Pending:
        me = self.topo.rank
        self.posted += len(sends) + len(recvs)
        for peer, buf in sends:
            self._world.boxes[(group, me, self.topo.to_world(group, peer))].put(buf.copy())
        keys = [(group, self.topo.to_world(group, peer), me) for peer, _ in recvs]
        return _Pending([(k, self._world.boxes[k]) for k in keys], [buf for _, buf in recvs])

    def exchange(self, sends, recvs, group: str = "world") -> None:
        self.start(sends, recvs, group).wait()

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def barrier(self, group: str = "world") -> None:
        """A barrier of ``group``; ``barriers`` counts them per group."""
        topo = self.topo
        self.barriers[group] = self.barriers.get(group, 0) + 1
        if group == "world":
            self._world.barrier.wait()
        elif group == "node":
            self._world.group_barrier(("node", topo.node), topo.gpus_per_node).wait()
        else:
            self._world.group_barrier(("rail", topo.local), topo.nodes).wait()

    def synchronize(self) -> None:
        """Nothing is queued."""


def run_ranks(nranks: int, gpus_per_node: int, fn) -> list:
    """``fn(transport)`` on every rank, each in its own thread; returns the results in
    rank order, or raises the lowest rank's exception."""
    world = _World(nranks)
    results: list = [None] * nranks
    errors: list = [None] * nranks

    def body(rank: int) -> None:
        try:
            results[rank] = fn(ThreadTransport(world, rank, gpus_per_node))
        except BaseException as exc:  # reported to the caller below
            errors[rank] = exc
            world.abort()

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(nranks)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(4 * TIMEOUT_S)
    if any(th.is_alive() for th in threads):
        raise TimeoutError("a rank never finished")
    for exc in errors:
        if exc is not None and not isinstance(exc, threading.BrokenBarrierError):
            raise exc
    for exc in errors:
        if exc is not None:
            raise exc
    return results
