"""What each collective means to the harness: sizes, buffers, seeded data and the check.

Implementations only say how to run once (``kernels``); everything here is shared, so
every implementation is measured and checked the same way. Data is seeded per rank and
per repetition and chosen so the expected result has a closed form: a rank can check its
output without seeing the other ranks' inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commbench.errors import UsageError
from commbench.harness.metrics import alltoallv_metric_bytes
from commbench.kernels.cases import AllreduceCase, AlltoallvCase, BlockCase
from commbench.kernels.dtypes import dtype_name, tolerance

#: ``-a`` default: max for all-to-allv (stragglers matter), avg otherwise (nccl-tests).
DEFAULT_TIME_REDUCTION = {
    "allreduce": 1, "alltoall": 1, "alltoallv": 3, "allgather": 1, "reducescatter": 1,
    "broadcast": 1,
}  # fmt: skip
#: Collectives made of equal rank blocks (:class:`commbench.kernels.cases.BlockCase`).
BLOCK_COLLECTIVES = ("allgather", "reducescatter", "broadcast")
#: Collectives that reduce (``-o`` applies).
REDUCING = ("allreduce", "reducescatter")
#: Collectives nccl-tests also runs in place (``--inplace``).
IN_PLACE = ("allreduce", "allgather", "reducescatter", "broadcast")
#: Collectives with a root (``--root``).
ROOTED = ("broadcast",)


@dataclass
class Point:
    """One measured point: the case plus what the record and the table need."""

    case: AllreduceCase | AlltoallvCase | BlockCase
    size_bytes: int
    count: int
    metric_bytes: int
    workload: str | None = None


# ---------------------------------------------------------------- all-reduce


def _allreduce_parts(rank: int, count: int, rep: int) -> tuple[np.ndarray, int]:
    """Rank ``rank``'s input = a(i) + b(rank): small integers, exact in every dtype."""
    i = np.arange(count, dtype=np.int64)
    a = (i * 13 + rep * 5) % 9 - 4
    b = (rank * 7 + rep) % 5 - 2
    return a, b


def _shift(dtype) -> int:
    """Added to every input of an unsigned type, so max and min compare what was meant."""
    return 6 if np.dtype(dtype).kind == "u" else 0


def allreduce_input(rank: int, count: int, rep: int, dtype, op: str) -> np.ndarray:
    a, b = _allreduce_parts(rank, count, rep)
    if op == "prod":  # +-1 keeps products exact and in range
        values = np.where((a + b) % 2 == 0, 1, -1)
    else:
        values = a + b + _shift(dtype)
    return values.astype(dtype)


def allreduce_expected(nranks: int, count: int, rep: int, op: str, shift: int = 0) -> np.ndarray:
    """The exact result in float64 (closed form over ranks); ``shift``: :func:`_shift`."""
    a, _ = _allreduce_parts(0, count, rep)
    bs = np.array([(r * 7 + rep) % 5 - 2 for r in range(nranks)]) + shift
    if op == "sum":
        return (nranks * a + bs.sum()).astype(np.float64)
    if op == "max":
        return (a + bs.max()).astype(np.float64)
    if op == "min":
        return (a + bs.min()).astype(np.float64)
    if op == "prod":
        signs = np.where((a[:, None] + bs[None, :]) % 2 == 0, 1, -1)
        return signs.prod(axis=1).astype(np.float64)
    raise UsageError(f"unknown reduction {op!r}: choose sum, prod, max or min")


def allreduce_wrong(
    got: np.ndarray, nranks: int, rep: int, op: str, expected: np.ndarray | None = None
) -> int:
    """Elements outside the dtype's tolerance (exact for integers); ``expected`` defaults
    to the whole all-reduce result (a reduce-scatter passes its block of it)."""
    if expected is None:
        expected = allreduce_expected(nranks, got.size, rep, op, _shift(got.dtype))
    if got.dtype.kind in "iu":  # integers wrap as C's do (MPI's and NCCL's sums)
        return int(np.count_nonzero(got != expected.astype(np.int64).astype(got.dtype)))
    scale = 6.0 * nranks if op == "sum" else 6.0
    err = np.abs(got.astype(np.float64) - expected)
    return int(np.count_nonzero(~(err <= tolerance(got.dtype, nranks) * scale)))


def allreduce_point(transport, size: int, dtype, op: str, inplace: bool = False) -> Point:
    dtype = np.dtype(dtype)
    if size % dtype.itemsize:
        raise UsageError(
            f"size {size} is not a multiple of the {dtype.itemsize}-byte {dtype_name(dtype)}: "
            "pick -b/-e/-f so every size is"
        )
    count = size // dtype.itemsize
    recv = transport.zeros(count, dtype)
    case = AllreduceCase(
        send=recv if inplace else transport.zeros(count, dtype),
        recv=recv,
        count=count,
        dtype=dtype,
        op=op,
        inplace=inplace,
    )
    return Point(case, size, count, size)


# ---------------------------------------------------------------- all-gather, reduce-scatter, broadcast


def block_point(
    transport, collective: str, size: int, dtype, op: str = "sum", root: int = 0,
    inplace: bool = False,
) -> Point:  # fmt: skip
    """nccl-tests' sizes: all-gather's ``size`` is the gathered buffer, reduce-scatter's
    the buffer reduced, both split into equal rank blocks of whole elements (floored, as
    nccl-tests floors ``count / nranks``; the remainder is not sent and ``metric_bytes``
    says what was); broadcast's is the buffer sent (a whole number of elements)."""
    dtype = np.dtype(dtype)
    rank, n = transport.topo.rank, transport.topo.size
    if collective == "broadcast":
        if size % dtype.itemsize:
            raise UsageError(
                f"size {size} is not a multiple of the {dtype.itemsize}-byte "
                f"{dtype_name(dtype)}: pick -b/-e/-f so every size is"
            )
        count = size // dtype.itemsize
        recv = transport.zeros(count, dtype)
        send = recv if inplace else transport.zeros(count, dtype)
        metric = count * dtype.itemsize
    else:
        count = size // (n * dtype.itemsize)
        full = transport.zeros(count * n, dtype)
        block = full[rank * count : (rank + 1) * count]
        if collective == "allgather":
            send, recv = (block if inplace else transport.zeros(count, dtype)), full
        else:
            send, recv = full, (block if inplace else transport.zeros(count, dtype))
        metric = count * n * dtype.itemsize
    case = BlockCase(collective, send, recv, count, dtype, rank, n, op, root, inplace)
    return Point(case, size, count, metric)


def block_data(rank: int, nbytes: int, rep: int) -> np.ndarray:
    """The bytes rank ``rank`` contributes (all-gather) or sends as root (broadcast)."""
    return _block(_pattern(nbytes), rank, rank, rep, nbytes)


def block_expected(case: BlockCase, rep: int) -> np.ndarray:
    """What ``case.recv`` must hold after the call: bytes (all-gather, broadcast) or the
    reduced values in float64 (reduce-scatter)."""
    nbytes = case.count * case.dtype.itemsize
    if case.collective == "allgather":
        return np.concatenate([block_data(r, nbytes, rep) for r in range(case.nranks)])
    if case.collective == "broadcast":
        return block_data(case.root, nbytes, rep)
    full = allreduce_expected(
        case.nranks, case.count * case.nranks, rep, case.op, _shift(case.dtype)
    )
    return full[case.rank * case.count : (case.rank + 1) * case.count]


def _fill_block(transport, case: BlockCase, rep: int) -> None:
    t, nbytes = transport, case.count * case.dtype.itemsize
    if case.collective == "reducescatter":
        host = allreduce_input(case.rank, case.count * case.nranks, rep, case.dtype, case.op)
        if not case.inplace:  # in place, recv is part of the input
            t.copy(case.recv, t.from_host(np.full(case.count, _poison(case.dtype), case.dtype)))
        t.copy(case.send, t.from_host(host))
        return
    poison = np.full(case.recv.size * case.dtype.itemsize, 0xFF, dtype=np.uint8)
    data = block_data(case.rank, nbytes, rep)
    if case.collective == "broadcast" and case.inplace and case.rank != case.root:
        data = poison  # the buffer a non-root rank receives into
    t.copy(_bytes(case.recv), t.from_host(poison))
    t.copy(_bytes(case.send), t.from_host(data))  # in place, after: send is part of recv


def _bytes(a):
    """The bytes of a 1-D buffer (so a copy moves bytes, never converts values)."""
    return a.view(np.uint8)


def _count_wrong_block(transport, case: BlockCase, rep: int) -> int:
    expected = block_expected(case, rep)
    if case.collective == "reducescatter":
        got = transport.to_host(case.recv, case.dtype)
        return allreduce_wrong(got, case.nranks, rep, case.op, expected)
    got = transport.to_host(case.recv).view(np.uint8)
    bad = (got != expected).reshape(-1, case.dtype.itemsize).any(axis=1)
    return int(np.count_nonzero(bad))


# ---------------------------------------------------------------- all-to-all(v)


def _pattern(length: int) -> np.ndarray:
    return (np.arange(length, dtype=np.int64) * 7 % 251).astype(np.uint8)


def _block(pattern: np.ndarray, src: int, dst: int, rep: int, n: int) -> np.ndarray:
    """Bytes ``src`` sends to ``dst``: a position pattern shifted per (src, dst, rep)."""
    shift = (src * 37 + dst * 11 + rep * 3) % 251
    return ((pattern[:n].astype(np.uint16) + shift) % 251).astype(np.uint8)


def alltoallv_send_data(traffic: np.ndarray, rank: int, rep: int) -> np.ndarray:
    row = traffic[rank]
    pattern = _pattern(int(row.max(initial=0)))
    parts = [_block(pattern, rank, dst, rep, int(n)) for dst, n in enumerate(row)]
    return np.concatenate(parts) if parts else np.empty(0, np.uint8)


def alltoallv_expected(traffic: np.ndarray, rank: int, rep: int) -> np.ndarray:
    col = traffic[:, rank]
    pattern = _pattern(int(col.max(initial=0)))
    parts = [_block(pattern, src, rank, rep, int(n)) for src, n in enumerate(col)]
    return np.concatenate(parts) if parts else np.empty(0, np.uint8)


def alltoallv_point(
    transport, traffic: np.ndarray, size: int, unit: int, workload: str | None
) -> Point:
    rank = transport.topo.rank
    send_bytes = int(traffic[rank].sum())
    recv_bytes = int(traffic[:, rank].sum())
    case = AlltoallvCase(
        traffic=traffic,
        send=transport.zeros(send_bytes, np.uint8),
        recv=transport.zeros(recv_bytes, np.uint8),
        rank=rank,
        unit=unit,
    )
    count = int(traffic[rank].max(initial=0)) // unit
    return Point(case, size, count, alltoallv_metric_bytes(traffic), workload)


def uniform_traffic(nranks: int, size: int, unit: int) -> np.ndarray:
    """All-to-all: ``size`` bytes per rank split equally (floored to the unit) over ranks."""
    per_peer = size // nranks // unit * unit
    return np.full((nranks, nranks), per_peer, dtype=np.int64)


def build_point(
    transport, collective: str, size: int, dtype, *, op: str = "sum", root: int = 0,
    inplace: bool = False, workload: str | None = None, seed: int = 0,
) -> Point:  # fmt: skip
    """The point of ``size`` bytes that ``commbench run COLLECTIVE`` measures: all-reduce's
    buffers, the rank blocks of all-gather, reduce-scatter and broadcast, all-to-all's
    uniform traffic, or all-to-allv's traffic drawn from ``workload`` (``seed``) in
    elements of ``dtype``."""
    if collective == "allreduce":
        return allreduce_point(transport, size, dtype, op, inplace)
    if collective in BLOCK_COLLECTIVES:
        return block_point(transport, collective, size, dtype, op, root, inplace)
    unit = np.dtype(dtype).itemsize
    nranks = transport.topo.size
    if collective == "alltoall":
        traffic = uniform_traffic(nranks, size, unit)
    else:
        from commbench.harness.workloads import generate

        traffic = generate(workload, nranks, size, seed=seed, unit=unit)
    return alltoallv_point(transport, traffic, size, unit, workload)


# ---------------------------------------------------------------- fill and check


def fill(transport, point: Point, rep: int) -> None:
    """Seed the send buffer for repetition ``rep`` and poison the receive buffer."""
    case = point.case
    rank = transport.topo.rank
    if isinstance(case, BlockCase):
        _fill_block(transport, case, rep)
        return
    if isinstance(case, AllreduceCase):
        host = allreduce_input(rank, case.count, rep, case.dtype, case.op)
        poison = np.full(case.count, _poison(case.dtype), dtype=case.dtype)
        if case.inplace:  # recv is the input
            transport.copy(case.send, transport.from_host(host))
            return
    else:
        host = alltoallv_send_data(case.traffic, rank, rep)
        poison = np.full(case.recv.size, 0xFF, dtype=np.uint8)
    transport.copy(case.send, transport.from_host(host))
    transport.copy(case.recv, transport.from_host(poison))


def _poison(dtype: np.dtype):
    """A value no correct result holds: NaN for floats, the minimum for integers."""
    return np.nan if dtype.kind == "f" or dtype_name(dtype) == "bfloat16" else np.iinfo(dtype).min


def count_wrong(transport, point: Point, rep: int) -> int:
    """This rank's wrong elements (all-reduce, all-gather, reduce-scatter, broadcast) or
    bytes (all-to-allv)."""
    case = point.case
    transport.synchronize()
    if isinstance(case, BlockCase):
        return _count_wrong_block(transport, case, rep)
    if isinstance(case, AllreduceCase):
        got = transport.to_host(case.recv, case.dtype)
        return allreduce_wrong(got, transport.topo.size, rep, case.op)
    got = transport.to_host(case.recv)
    expected = alltoallv_expected(case.traffic, transport.topo.rank, rep)
    return int(np.count_nonzero(got != expected))
