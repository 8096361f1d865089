"""The fused 8-byte "LL8" cell format of NVRAR's inter-node step.

A cell is 8 bytes: 4 bytes of data followed by a 32-bit flag (little-endian, so as a
uint64 the data is the low word and the flag the high word). fp32/int32 put one element
in a cell, fp16/bf16 two; an odd 16-bit tail leaves the second half of the last cell zero.
An aligned 8-byte write lands whole, so a receiver that sees the expected flag in a cell
also sees that cell's data: no separate signal, no fence.

The flag is the call's sequence number, never 0 (fresh buffers are zeroed, so a zero flag
must never mean "ready"). Buffers are never cleared between calls.

Everything here is pure array code against ``xp`` (numpy or cupy); the CUDA kernels in
``ll8.cu`` implement the same layout and are checked against these functions.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

Array = Any

CELL_BYTES = 8
DATA_BYTES = 4
_FLAG_PERIOD = 0xFFFFFFFF  # flags cycle through 1 .. 2**32 - 1

if sys.byteorder != "little":  # pragma: no cover - every supported CPU and GPU is little-endian
    raise ImportError("the LL8 cell format assumes a little-endian machine")


def seq_flag(t: int) -> int:
    """The 32-bit flag of call ``t`` (t >= 1): t modulo 2**32 - 1, skipping 0."""
    if t < 1:
        raise ValueError(f"sequence numbers start at 1, got {t}")
    return (t - 1) % _FLAG_PERIOD + 1


def elems_per_cell(itemsize: int) -> int:
    if itemsize not in (2, 4):
        raise ValueError(f"LL8 cells hold 2- or 4-byte elements, not {itemsize}-byte ones")
    return DATA_BYTES // itemsize


def cell_count(count: int, itemsize: int) -> int:
    """Cells needed for ``count`` elements of ``itemsize`` bytes (a partial last cell counts)."""
    epc = elems_per_cell(itemsize)
    return -(-count // epc)


def _word_dtype(itemsize: int) -> type:
    return np.uint16 if itemsize == 2 else np.uint32


def pack(xp: ModuleType, data: Array, flag: int, cells: Array) -> None:
    """Write ``data`` (1-D, contiguous, 2- or 4-byte elements) with ``flag`` into ``cells``.

    ``cells`` is a uint64 array of exactly ``cell_count(data.size, itemsize)`` cells.
    """
    itemsize = data.dtype.itemsize
    n = data.size
    ncells = cell_count(n, itemsize)
    if cells.size != ncells:
        raise ValueError(f"pack: {n} elements need {ncells} cells, got {cells.size}")
    if ncells == 0:
        return
    words = cells.view(np.uint32)
    full = n * itemsize // DATA_BYTES  # cells whose 4 data bytes are all data
    if itemsize == 2:
        raw = data.view(np.uint16)
        words[0 : 2 * full : 2] = raw[: 2 * full].view(np.uint32)
        if full < ncells:  # odd 16-bit tail: the element, then two zero bytes
            words[2 * full : 2 * full + 1] = raw[2 * full :].astype(np.uint32)
    else:
        words[0::2] = data.view(np.uint32)
    words[1::2] = np.uint32(flag)


def unpack(xp: ModuleType, cells: Array, count: int, itemsize: int) -> Array:
    """The ``count`` data elements of ``cells`` as a contiguous uint16/uint32 array."""
    ncells = cells.size
    if cell_count(count, itemsize) != ncells:
        raise ValueError(f"unpack: {count} elements do not fill {ncells} cells")
    words = xp.ascontiguousarray(cells.view(np.uint32)[0::2])
    return words.view(_word_dtype(itemsize))[:count]


def flags(cells: Array) -> Array:
    """The flag words of ``cells`` (a strided uint32 view)."""
    return cells.view(np.uint32)[1::2]


def ready_prefix(xp: ModuleType, cells: Array, flag: int) -> int:
    """How many leading cells carry ``flag`` (== cells.size when all have arrived)."""
    if cells.size == 0:
        return 0
    ok = flags(cells) == np.uint32(flag)
    if bool(ok.all()):
        return int(cells.size)
    return int(xp.argmin(ok))


@dataclass(frozen=True)
class RailLayout:
    """Symmetric-buffer layout of the inter-node step, in uint64 words.

    ``[credits: nsteps words, padded to 8][recv region of step 0]...[recv region of step
    nsteps-1]``; each receive region holds ``ncells`` cells and is written only by that
    step's sender. Send regions (one per step) live in a separate buffer of
    ``nsteps * ncells`` cells.
    """

    nsteps: int
    ncells: int

    @property
    def credit_words(self) -> int:
        return -(-max(self.nsteps, 1) // 8) * 8

    def recv_offset(self, step: int) -> int:
        return self.credit_words + step * self.ncells

    @property
    def window_words(self) -> int:
        return self.credit_words + self.nsteps * self.ncells

    @property
    def send_words(self) -> int:
        return self.nsteps * self.ncells

    def send_offset(self, step: int) -> int:
        return step * self.ncells
