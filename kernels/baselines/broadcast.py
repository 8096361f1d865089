"""Broadcast over the transport: a pipelined binomial tree (the buffer cut into chunks of
``--param chunk_bytes``; a rank forwards chunk k to its children while it receives chunk
k + 1) and van de Geijn's scatter + all-gather (a binomial scatter of P blocks, then a
ring all-gather: about 2 n bytes per rank whatever P, for large buffers)."""

from __future__ import annotations

from commbench.kernels.baselines._allreduce import block_bounds, span
from commbench.kernels.baselines._blocks import BlockAlgorithm, ring_allgather
from commbench.kernels.cases import BlockCase
from commbench.kernels.registry import register

#: ``chunk_bytes``' default: large enough that a chunk's latency is small next to its
#: bytes on a NIC, small enough to pipeline a few MiB over a few tree levels
DEFAULT_CHUNK_BYTES = 256 << 10


def binomial_tree(v: int, p: int) -> tuple[int | None, list[int]]:
    """Parent and children of participant ``v`` (0 is the root) of a binomial tree over
    ``p``: the parent clears v's lowest set bit; children add each lower power of two,
    the largest subtree first."""
    low = v & -v if v else 1 << p.bit_length()
    parent = v - low if v else None
    children = []
    mask = low >> 1
    while mask:
        if v + mask < p:
            children.append(v + mask)
        mask >>= 1
    return parent, children


class _Broadcast(BlockAlgorithm):
    def _buffer(self, case: BlockCase):
        """``recv``, holding the data on the root (copied from ``send`` out of place)."""
        if self.rank == case.root and not case.inplace:
            self.t.copy(case.recv, case.send)
        return case.recv

    def _world(self, root: int):
        p = self.size
        return lambda v: (v + root) % p


@register("broadcast", "tree")
class TreeBroadcast(_Broadcast):
    """Pipelined binomial tree: chunk_bytes chunks forwarded down while the next arrives."""

    PARAMS = ("chunk_bytes",)

    def __init__(self, transport, params: dict | None = None) -> None:
        super().__init__(transport, params)
        chunk = self.params.get("chunk_bytes", DEFAULT_CHUNK_BYTES)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"--param chunk_bytes={chunk!r}: give a whole number of bytes >= 1")
        self.chunk_bytes = chunk

    def setup(self, case: BlockCase) -> None:
        world = self._world(case.root)
        v = (self.rank - case.root) % self.size
        parent, children = binomial_tree(v, self.size)
        self.parent = None if parent is None else world(parent)
        self.children = [world(c) for c in children]
        step = max(1, self.chunk_bytes // case.dtype.itemsize)
        self.chunks = [(a, min(a + step, case.count)) for a in range(0, case.count, step)]

    def run(self, case: BlockCase) -> None:
        buf, chunks, parent = self._buffer(case), self.chunks, self.parent
        if not chunks or self.size == 1:
            return
        t = self.t
        if parent is not None:
            t.exchange([], [(parent, buf[slice(*chunks[0])])])
        for k, (a, b) in enumerate(chunks):
            nxt = chunks[k + 1] if k + 1 < len(chunks) else None
            t.exchange(
                [(child, buf[a:b]) for child in self.children],
                [(parent, buf[slice(*nxt)])] if parent is not None and nxt else [],
            )

    def info(self) -> dict:
        return {
            "algorithm": "pipelined binomial tree",
            "chunk_bytes": self.chunk_bytes,
            "chunks": len(self.chunks),
            "depth": (self.size - 1).bit_length(),
        }


@register("broadcast", "scatter-allgather")
class ScatterAllgatherBroadcast(_Broadcast):
    """van de Geijn: binomial scatter of P blocks from the root, then a ring all-gather."""

    def setup(self, case: BlockCase) -> None:
        self.bounds = block_bounds(case.count, self.size)

    def run(self, case: BlockCase) -> None:
        buf, p = self._buffer(case), self.size
        if not case.count or p == 1:
            return
        t, b, world = self.t, self.bounds, self._world(case.root)
        v = (self.rank - case.root) % p
        mask = 1
        while mask < p:  # receive blocks [v, v + mask) from v - mask
            if v & mask:
                lo, hi = span(b, v, min(v + mask, p))
                if hi > lo:
                    t.exchange([], [(world(v - mask), buf[lo:hi])])
                break
            mask <<= 1
        mask >>= 1
        while mask:  # hand blocks [v + mask, v + 2 mask) on
            if v + mask < p:
                lo, hi = span(b, v + mask, min(v + 2 * mask, p))
                if hi > lo:
                    t.exchange([(world(v + mask), buf[lo:hi])], [])
            mask >>= 1
        ring_allgather(t, buf, b, v, world)

    def info(self) -> dict:
        return {"algorithm": "scatter + ring all-gather", "steps": (self.size - 1).bit_length()
                + self.size - 1}  # fmt: skip
