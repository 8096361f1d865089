"""All-gather, reduce-scatter and broadcast: every CPU algorithm on in-process ranks
(:mod:`tests.threaded_transport`) against the result MPI defines, over sizes that do not
divide evenly, roots, dtypes, reductions and in place; the harness's seeded data and
check; the refusals. tests/test_blocks_mpi.py compares them with the MPI library."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.harness import collectives, metrics
from commbench.kernels.baselines.broadcast import binomial_tree
from commbench.kernels.cases import BlockCase
from commbench.kernels.registry import implementations, lookup
from tests.threaded_transport import run_ranks

DTYPES = ("float32", "float16", "int32", "int8", "float64")


def cpu_algorithms(collective: str) -> list[str]:
    """The implementations written over the transport (MPI's own is tested under MPI)."""
    return [s.name for s in implementations(collective) if "cpu" in s.backends and s.name != "mpi"]


def inputs(collective: str, rank: int, count: int, nranks: int, dtype, seed: int) -> np.ndarray:
    """Rank ``rank``'s input: small integers, so every reduction order gives the same bits."""
    rng = np.random.default_rng([seed, rank])
    n = count * nranks if collective == "reducescatter" else count
    return rng.integers(-8, 9, n).astype(dtype)


def expected(collective: str, data: list[np.ndarray], rank: int, count: int, root: int, op: str):
    """What MPI_Allgather, MPI_Reduce_scatter_block (``op``) and MPI_Bcast deliver."""
    if collective == "allgather":
        return np.concatenate(data)
    if collective == "broadcast":
        return data[root]
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    total = ufunc.reduce(np.stack(data), axis=0, dtype=data[0].dtype)
    return total[rank * count : (rank + 1) * count]


def run_one(collective, impl, nranks, count, dtype, op, root, inplace, seed, params=None):
    dtype = np.dtype(dtype)
    data = [inputs(collective, r, count, nranks, dtype, seed) for r in range(nranks)]
    if op == "prod":
        data = [np.where(d >= 0, 1, -1).astype(dtype) for d in data]

    def body(t):
        r = t.topo.rank
        full = np.full(count * nranks, 99, dtype)
        if collective == "allgather":
            recv = full
            send = recv[r * count : (r + 1) * count] if inplace else np.empty(count, dtype)
            send[...] = data[r]
        elif collective == "reducescatter":
            send = full
            send[...] = data[r]
            recv = send[r * count : (r + 1) * count] if inplace else np.full(count, 99, dtype)
        else:
            recv = np.full(count, 99, dtype)
            send = recv if inplace else np.empty(count, dtype)
            if r == root or not inplace:
                send[...] = data[r]
        case = BlockCase(collective, send, recv, count, dtype, r, nranks, op, root, inplace)
        algo = lookup(collective, impl).factory(t, params or {})
        algo.setup(case)
        algo.run(case)
        algo.run(case) if not inplace else None  # twice: no state left from a call
        return recv.copy()

    got = run_ranks(nranks, 1, body)
    for r in range(nranks):
        want = expected(collective, data, r, count, root, op)
        assert got[r].tobytes() == want.tobytes(), (collective, impl, nranks, r)


CASES = st.fixed_dictionaries(
    {
        "nranks": st.integers(1, 8),
        "count": st.integers(0, 40),
        "dtype": st.sampled_from(DTYPES),
        "op": st.sampled_from(("sum", "prod", "max", "min")),
        "root": st.integers(0, 7),
        "inplace": st.booleans(),
        "seed": st.integers(0, 2**16),
    }
)


@pytest.mark.parametrize(
    "collective,impl",
    [(c, i) for c in collectives.BLOCK_COLLECTIVES for i in cpu_algorithms(c)],
)
@settings(max_examples=25, deadline=None)
@given(case=CASES)
def test_algorithms_deliver_what_mpi_defines(collective, impl, case):
    spec = lookup(collective, impl)
    if spec.pow2_ranks and case["nranks"] & (case["nranks"] - 1):
        case["nranks"] = 1 << (case["nranks"].bit_length() - 1)
    case["root"] %= case["nranks"]
    if collective != "reducescatter":
        case["op"] = "sum"
    run_one(collective, impl, **case)


@settings(max_examples=20, deadline=None)
@given(
    nranks=st.integers(1, 8),
    count=st.integers(0, 300),
    chunk=st.integers(1, 64),
    root=st.integers(0, 7),
    inplace=st.booleans(),
)
def test_tree_broadcast_any_chunk_size(nranks, count, chunk, root, inplace):
    """Chunks of any byte size, not dividing the buffer (rounded to whole elements)."""
    run_one("broadcast", "tree", nranks, count, "float32", "sum", root % nranks, inplace, 7,
            {"chunk_bytes": chunk})  # fmt: skip


def test_binomial_tree_reaches_every_rank_once():
    for p in range(1, 20):
        parents = {}
        for v in range(p):
            parent, children = binomial_tree(v, p)
            assert (parent is None) == (v == 0)
            for c in children:
                assert c not in parents and binomial_tree(c, p)[0] == v
                parents[c] = v
        assert sorted(parents) == list(range(1, p))


def test_power_of_two_algorithms_refuse_other_rank_counts():
    for collective, impl in (("allgather", "recursive-doubling"),
                             ("reducescatter", "recursive-halving")):  # fmt: skip
        spec = lookup(collective, impl)
        assert spec.pow2_ranks and spec.ranks_problem(8) is None
        assert "power-of-two number of ranks, not 6" in spec.ranks_problem(6)
        with pytest.raises(ValueError, match="power-of-two"):
            run_ranks(3, 1, lambda t, f=spec.factory: f(t, {}))


@pytest.mark.parametrize("chunk", [0, -5, "big", 1.5])
def test_tree_broadcast_refuses_a_bad_chunk_size(chunk):
    with pytest.raises(ValueError, match="chunk_bytes"):
        run_ranks(1, 1, lambda t: lookup("broadcast", "tree").factory(t, {"chunk_bytes": chunk}))


def test_bus_bandwidth_factors_are_nccl_tests():
    assert metrics.busbw_factor("allgather", 8) == metrics.busbw_factor("reducescatter", 8) == 7 / 8
    assert metrics.busbw_factor("broadcast", 8) == 1.0
    assert metrics.busbw_factor("allreduce", 8) == 2 * 7 / 8


class _Topo:
    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size


class _HostTransport:
    """What the harness's point builders, fill and check use, on numpy."""

    def __init__(self, rank: int, size: int) -> None:
        self.topo = _Topo(rank, size)

    def zeros(self, count, dtype):
        return np.zeros(count, dtype)

    def copy(self, dst, src):
        np.copyto(dst, src)

    def from_host(self, a):
        return a

    def to_host(self, a, dtype=None):
        return a.view(dtype) if dtype is not None else a

    def synchronize(self):
        pass


@pytest.mark.parametrize("collective", collectives.BLOCK_COLLECTIVES)
@pytest.mark.parametrize("inplace", [False, True])
def test_harness_sizes_fill_and_check(collective, inplace):
    """nccl-tests' sizes (all-gather: the gathered buffer, reduce-scatter: the reduced
    buffer, floored to rank blocks of whole elements; broadcast: the buffer), the seeded
    data, and a check that accepts the right answer and counts wrong elements."""
    n, size, dtype, root = 3, 1000, np.dtype(np.float32), 2
    points = [
        collectives.block_point(_HostTransport(r, n), collective, size, dtype, "sum", root,
                                inplace)
        for r in range(n)
    ]  # fmt: skip
    if collective == "broadcast":
        assert points[0].count == 250 and points[0].metric_bytes == 1000
    else:
        assert points[0].count == 1000 // (3 * 4) and points[0].metric_bytes == 83 * 3 * 4
    for r, pt in enumerate(points):
        collectives.fill(_HostTransport(r, n), pt, rep=5)
    cases = [p.case for p in points]
    if inplace:  # the views nccl-tests has
        c = cases[1]
        base = c.send if collective == "reducescatter" else c.recv
        assert np.shares_memory(c.send, c.recv) and np.shares_memory(base, c.send)
    for r, pt in enumerate(points):  # poisoned: wrong before the call
        want = 0 if (collective == "broadcast" and r == root and inplace) else pt.count
        assert collectives.count_wrong(_HostTransport(r, n), pt, 5) >= min(want, 1)
    # do the collective by hand, then every rank checks clean
    if collective == "allgather":
        full = np.concatenate([c.send.copy() for c in cases])
        for c in cases:
            c.recv[...] = full
    elif collective == "broadcast":
        data = cases[root].send.copy()
        for c in cases:
            c.recv[...] = data
    else:
        total = np.sum([c.send.astype(np.float64) for c in cases], axis=0)
        for r, c in enumerate(cases):
            c.recv[...] = total[r * c.count : (r + 1) * c.count]
    for r, pt in enumerate(points):
        assert collectives.count_wrong(_HostTransport(r, n), pt, 5) == 0
    cases[0].recv[:2] = 7  # two wrong elements on rank 0
    assert collectives.count_wrong(_HostTransport(0, n), points[0], 5) == 2


def test_list_shows_the_new_collectives_and_their_flags(capsys):
    from commbench.harness.driver import list_implementations

    for collective in collectives.BLOCK_COLLECTIVES:
        list_implementations(collective)
    out = capsys.readouterr().out.splitlines()
    rows = {(line.split()[0], line.split()[1]) for line in out}
    assert ("allgather", "recursive-doubling") in rows and ("broadcast", "tree") in rows
    assert ("reducescatter", "nccl") in rows and ("broadcast", "rccl") in rows
    halving = next(x for x in out if x.split()[:2] == ["reducescatter", "recursive-halving"])
    assert "[2^k ranks]" in halving
    mpi = next(x for x in out if x.split()[:2] == ["broadcast", "mpi"])
    assert "[no -G]" in mpi


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int64", "float16"])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_reduce_scatter_check_accepts_the_wrapped_integer_result(dtype, op):
    """Inputs reduced as MPI does it in the dtype (integer sums wrap: 40 ranks overflow
    int8) are what the check expects; unsigned inputs are shifted so max/min mean what
    they say."""
    n, dt = 40, np.dtype(dtype)
    points = [collectives.block_point(_HostTransport(r, n), "reducescatter", 40 * 12 * dt.itemsize,
                                      dt, op) for r in range(n)]  # fmt: skip
    for r, pt in enumerate(points):
        collectives.fill(_HostTransport(r, n), pt, rep=3)
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    with np.errstate(over="ignore"):
        total = ufunc.reduce(np.stack([p.case.send for p in points]), axis=0, dtype=dt)
    for r, pt in enumerate(points):
        pt.case.recv[...] = total[r * 12 : (r + 1) * 12]
        assert collectives.count_wrong(_HostTransport(r, n), pt, 3) == 0
    points[1].case.recv[0] += 1 if dt.kind in "iu" else 100  # beyond fp16 sum tolerance
    assert collectives.count_wrong(_HostTransport(1, n), points[1], 3) == 1
