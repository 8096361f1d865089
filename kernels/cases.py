"""The inputs of one measured point, as the harness hands them to an implementation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Array = Any


@dataclass
class AllreduceCase:
    """``recv = op over ranks of send``; both buffers hold ``count`` elements of ``dtype``."""

    send: Array
    recv: Array
    count: int
    dtype: np.dtype
    op: str = "sum"
    #: ``send`` is ``recv`` (nccl-tests' in-place call)
    inplace: bool = False


@dataclass
class BlockCase:
    """All-gather, reduce-scatter or broadcast with MPI's and NCCL's buffer layout.

    ``count`` elements of ``dtype`` per rank block (all-gather: ``send`` holds ``count``,
    ``recv`` ``count * nranks``; reduce-scatter: the other way round); for broadcast
    ``count`` is the whole buffer, which ``root``'s ``send`` holds and every ``recv`` gets.
    In place (``inplace``), as in nccl-tests: all-gather's ``send`` is ``recv``'s block
    ``rank``, reduce-scatter's ``recv`` is ``send``'s block ``rank``, broadcast's ``send``
    is ``recv``.
    """

    collective: str
    send: Array
    recv: Array
    count: int
    dtype: np.dtype
    rank: int
    nranks: int
    op: str = "sum"
    root: int = 0
    inplace: bool = False


@dataclass
class AlltoallvCase:
    """All-to-allv in bytes, with MPI_Alltoallv's layout.

    ``traffic[u, v]`` is the number of bytes rank u sends to rank v (int64, P x P, known
    to every rank). ``send`` is packed by destination rank, ``recv`` by source rank;
    counts and displacements are this rank's row / column of ``traffic`` and their
    exclusive prefix sums. ``unit`` is the alignment unit in bytes (the element size).
    """

    traffic: np.ndarray
    send: Array
    recv: Array
    rank: int
    unit: int = 1
    extra: dict = field(default_factory=dict)

    @property
    def sendcounts(self) -> np.ndarray:
        return self.traffic[self.rank, :]

    @property
    def recvcounts(self) -> np.ndarray:
        return self.traffic[:, self.rank]

    @property
    def sdispls(self) -> np.ndarray:
        return exclusive_cumsum(self.sendcounts)

    @property
    def rdispls(self) -> np.ndarray:
        return exclusive_cumsum(self.recvcounts)


def exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=out[1:])
    return out
