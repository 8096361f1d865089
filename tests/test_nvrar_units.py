"""Pure parts of NVRAR and the all-reduce baselines: cells, reductions, schedule, tuning."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench import launch
from commbench.kernels.baselines._allreduce import block_bounds, span
from commbench.kernels.doubling import (
    EXCHANGE,
    FOLD_IN,
    FOLD_OUT,
    Step,
    doubling_steps,
    pow2_floor,
    step_count,
)
from commbench.kernels.nvrar import cells
from commbench.kernels.nvrar.allreduce import parse_params
from commbench.kernels.nvrar.schedule import (
    padded_count,
    timeout_message,
)
from commbench.kernels.nvrar.tuning import (
    Tuning,
    chunk_bounds,
    load_table,
    parse_table,
    table_path,
    with_overrides,
)
from commbench.kernels.reduce import (
    BF16,
    SUPPORTED_DTYPES,
    bind_reduce,
    check_dtype,
    check_op,
    f32_to_bf16,
    reduce_bf16_bits,
    reduce_into,
)
from commbench.kernels.registry import lookup
from commbench.launch import under_launcher

DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16, np.dtype(np.int32)]


def _random(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.kind == "i":
        return rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int64).astype(dtype)
    return (rng.standard_normal(n) * 100).astype(dtype)


# ------------------------------------------------------------------ LL8 cells


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    n=st.integers(0, 67),
    t=st.integers(1, 2**40),
    seed=st.integers(0, 2**16),
)
def test_pack_unpack_round_trip(dtype, n, t, seed):
    data = _random(dtype, n, seed)
    ncells = cells.cell_count(n, dtype.itemsize)
    assert ncells == -(-n * dtype.itemsize // 4)
    out = np.full(ncells, 0xDEADBEEFDEADBEEF, dtype=np.uint64)  # stale junk must vanish
    storage = data.view(np.uint16) if dtype.itemsize == 2 else data.view(np.uint32)
    cells.pack(np, storage, cells.seq_flag(t), out)
    assert np.all(cells.flags(out) == cells.seq_flag(t))
    assert cells.ready_prefix(np, out, cells.seq_flag(t)) == ncells
    back = cells.unpack(np, out, n, dtype.itemsize).view(dtype)
    assert back.tobytes() == data.tobytes()  # bit-exact, NaN payloads included
    if dtype.itemsize == 2 and n % 2:  # the unused half of the last cell is zero
        assert int(out[-1]) & 0xFFFF0000 == 0


def test_cell_layout_is_data_then_flag():
    data = np.array([1.0, 2.0], dtype=np.float32)
    out = np.zeros(2, np.uint64)
    cells.pack(np, data.view(np.uint32), 7, out)
    raw = out.tobytes()
    assert raw[0:4] == data[:1].tobytes() and raw[4:8] == np.uint32(7).tobytes()
    assert int(out[1]) == (7 << 32) | int(data[1:].view(np.uint32)[0])
    half = np.array([1, 2, 3], dtype=np.float16)
    out = np.zeros(2, np.uint64)
    cells.pack(np, half.view(np.uint16), 9, out)
    assert out.tobytes()[:4] == half[:2].tobytes()
    assert out.tobytes()[8:10] == half[2:].tobytes() and out.tobytes()[10:12] == b"\0\0"


def test_pack_rejects_wrong_cell_count_and_item_size():
    with pytest.raises(ValueError, match="need 2 cells"):
        cells.pack(np, np.zeros(3, np.uint16), 1, np.zeros(3, np.uint64))
    with pytest.raises(ValueError, match="2- or 4-byte"):
        cells.cell_count(4, 8)


def test_ready_prefix_finds_first_missing_cell():
    out = np.zeros(10, np.uint64)
    cells.pack(np, np.arange(10, dtype=np.uint32), 5, out)
    cells.flags(out)[6] = 4  # cell 6 still holds the previous call's flag
    assert cells.ready_prefix(np, out, 5) == 6
    assert cells.ready_prefix(np, out, 4) == 0


@settings(max_examples=40, deadline=None)
@given(ncells=st.integers(1, 40), a_frac=st.floats(0, 1), order_seed=st.integers(0, 2**16))
def test_arrival_keeps_the_data_it_saw_with_the_flags(ncells, a_frac, order_seed):
    """Cells land one by one in any order; the chunk is ready only once every cell of it
    carries the flag, and its data is what was read with those flags, even if the window
    is written again afterwards (no re-read of the window)."""
    from commbench.kernels.nvrar.cpu import Arrival

    region = np.zeros(ncells, np.uint64)
    a = int(a_frac * (ncells - 1))
    sent = np.zeros(ncells, np.uint64)
    cells.pack(np, np.arange(100, 100 + ncells, dtype=np.uint32), 7, sent)
    arrival = Arrival(region, a, ncells, 7)
    for k in np.random.default_rng(order_seed).permutation(np.arange(a, ncells)):
        assert not arrival()
        region[k] = sent[k]
    assert arrival()
    region[:] = 0  # the next write of this region (call t + 2)
    data = cells.unpack(np, arrival.cells, ncells - a, 4)
    assert data.tolist() == list(range(100 + a, 100 + ncells))


def test_seq_flag_is_never_zero_and_changes_every_call():
    assert cells.seq_flag(1) == 1
    assert cells.seq_flag(2**32 - 1) == 2**32 - 1
    assert cells.seq_flag(2**32) == 1  # wraps past 0: a fresh (zeroed) cell is never ready
    for t in (1, 2, 2**32 - 2, 2**32 - 1, 2**32, 2**33 + 5):
        assert 0 < cells.seq_flag(t) < 2**32
        assert cells.seq_flag(t) != cells.seq_flag(t + 1)
    with pytest.raises(ValueError):
        cells.seq_flag(0)


def test_rail_layout_regions_do_not_overlap():
    lay = cells.RailLayout(nsteps=5, ncells=7)
    assert lay.credit_words >= 5 and lay.credit_words % 8 == 0
    starts = [lay.recv_offset(s) for s in range(5)]
    assert starts[0] == lay.credit_words
    assert all(b - a == 7 for a, b in zip(starts, starts[1:], strict=False))
    assert lay.window_words == starts[-1] + 7
    assert lay.send_words == 35 and lay.send_offset(4) == 28


# ------------------------------------------------------------------ reductions

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 3.0e38, -3.0e38, 1e-40, float("inf"), float("-inf"), float("nan")]
_floats = st.one_of(st.sampled_from(_SPECIAL), st.floats(allow_nan=True, width=32))


@settings(max_examples=80, deadline=None)
@given(
    a=st.lists(_floats, min_size=1, max_size=40),
    b=st.lists(_floats, min_size=1, max_size=40),
    op=st.sampled_from(["sum", "prod", "max", "min"]),
)
def test_bf16_bit_reduction_matches_ml_dtypes(a, b, op):
    n = min(len(a), len(b))
    x = np.array(a[:n], dtype=np.float32).astype(BF16)
    y = np.array(b[:n], dtype=np.float32).astype(BF16)
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    with np.errstate(all="ignore"):
        want = ufunc(x, y)
    got = np.empty(n, dtype=np.uint16)
    with np.errstate(all="ignore"):
        reduce_bf16_bits(np, got, x.view(np.uint16), y.view(np.uint16), op)
    got = got.view(BF16)
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert got[~nan].tobytes() == want[~nan].tobytes()
    fast = np.empty(n, dtype=BF16)  # the numpy fast path gives the same bits
    with np.errstate(all="ignore"):
        reduce_into(np, fast, x, y, op, BF16)
    assert fast[~nan].tobytes() == want[~nan].tobytes()


@settings(max_examples=40, deadline=None)
@given(bits=st.integers(0, 2**32 - 1))
def test_f32_to_bf16_rounds_like_ml_dtypes(bits):
    f = np.array([bits], dtype=np.uint32).view(np.float32)
    want = f.astype(BF16)
    got = f32_to_bf16(np, f).view(BF16)
    if np.isnan(f[0]):
        assert np.isnan(got.astype(np.float32)[0])
    else:
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_into_all_ops(dtype):
    a = np.array([1, -2, 3, 4], dtype=dtype)
    b = np.array([5, 6, -7, 4], dtype=dtype)
    out = np.empty(4, dtype=dtype)
    for op, want in [("sum", [6, 4, -4, 8]), ("prod", [5, -12, -21, 16]),
                     ("max", [5, 6, 3, 4]), ("min", [1, -2, -7, 4])]:  # fmt: skip
        reduce_into(np, out, a, b, op, dtype)
        assert out.astype(np.float64).tolist() == want
    reduce_into(np, a, a, b, "sum", dtype)  # in place
    assert a.astype(np.float64).tolist() == [6, 4, -4, 8]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_bound_reduction_gives_reduce_intos_bytes(dtype, op):
    rng = np.random.default_rng(7)
    a = rng.integers(-50, 50, 64).astype(np.float32).astype(dtype)
    b = rng.integers(-50, 50, 64).astype(np.float32).astype(dtype)
    want = np.empty_like(a)
    reduce_into(np, want, a, b, op, np.dtype(dtype))
    acc = a.view(np.uint8).copy()  # the algorithms' buffers: bytes, reduced in place
    bind_reduce(np, acc, acc, b.view(np.uint8), op, np.dtype(dtype))()
    assert acc.tobytes() == want.tobytes()


def test_int32_sum_wraps_like_mpi():
    a = np.array([2**31 - 1], dtype=np.int32)
    out = np.empty(1, np.int32)
    reduce_into(np, out, a, np.array([1], np.int32), "sum", np.dtype(np.int32))
    assert out[0] == -(2**31)


def test_dtype_and_op_checks():
    assert set(SUPPORTED_DTYPES) == set(DTYPES)
    assert check_dtype(ml_dtypes.bfloat16) == BF16
    with pytest.raises(ValueError, match="float64 is not supported"):
        check_dtype(np.float64)
    with pytest.raises(ValueError, match="use one of: sum"):
        check_op("avg")


# ------------------------------------------------------------------ schedule


def _simulate(n: int) -> list[Counter]:
    """Run the schedule symbolically: which inputs (with multiplicity) each participant holds."""
    plans = [doubling_steps(n, me) for me in range(n)]
    assert len({len(p) for p in plans}) == 1 and len(plans[0]) == step_count(n)
    held = [Counter({me: 1}) for me in range(n)]
    for s in range(step_count(n)):
        steps = [plans[me][s] for me in range(n)]
        sent = {}
        for me, st_ in enumerate(steps):
            assert st_.index == s and len({x.kind for x in steps}) == 1
            if st_.send_to is not None:
                peer = steps[st_.send_to]
                assert peer.recv_from == me, (
                    f"step {s}: {me} sends to {st_.send_to} who does not receive"
                )
                sent[st_.send_to] = Counter(held[me])
        for me, st_ in enumerate(steps):
            if st_.recv_from is not None:
                assert steps[st_.recv_from].send_to == me
                if st_.combine == "reduce":
                    held[me] = held[me] + sent[me]
                else:
                    assert st_.combine == "replace"
                    held[me] = sent[me]
            else:
                assert me not in sent and st_.combine is None
    return held


@pytest.mark.parametrize("n", list(range(1, 18)) + [31, 32, 33, 48])
def test_doubling_schedule_sums_every_input_exactly_once(n):
    everything = Counter(range(n))
    for me, got in enumerate(_simulate(n)):
        assert got == everything, f"participant {me} of {n}"


@pytest.mark.parametrize("n", list(range(1, 18)) + [31, 32, 33, 48])
def test_every_doubling_partner_sends_back_so_its_data_is_the_credit(n):
    # NVRAR's cpu path sends no credits: the data a partner puts in call t-1 proves it
    # consumed call t-2, which holds only if every rank a participant sends to also sends
    # to it in the same call (kernels/nvrar/cpu.py's docstring)
    for me in range(n):
        steps = doubling_steps(n, me)
        sends_to = {s.send_to for s in steps} - {None}
        hears_from = {s.recv_from for s in steps} - {None}
        assert sends_to == hears_from, f"participant {me} of {n}"


def test_schedule_shape_for_three_nodes():
    p2 = pow2_floor(3)
    assert p2 == 2 and step_count(3) == 3 and step_count(4) == 2 and step_count(1) == 0
    assert doubling_steps(3, 2) == [
        Step(0, FOLD_IN, 0, None, None),
        Step(1, EXCHANGE, None, None, None),
        Step(2, FOLD_OUT, None, 0, "replace"),
    ]
    assert doubling_steps(3, 0)[1] == Step(1, EXCHANGE, 1, 1, "reduce")
    assert doubling_steps(3, 1)[0] == Step(0, FOLD_IN, None, None, None)


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError):
        doubling_steps(4, 4)
    with pytest.raises(ValueError):
        pow2_floor(0)


@given(count=st.integers(0, 10_000), parts=st.integers(1, 16))
def test_padded_count_and_block_bounds(count, parts):
    padded = padded_count(count, parts)
    assert padded % parts == 0 and count <= padded < count + parts
    bounds = block_bounds(count, parts)
    assert bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    sizes = [e - s for s, e in bounds]
    assert max(sizes) - min(sizes) <= 1
    assert span(bounds, 0, parts) == (0, count)


def test_timeout_message_names_step_and_partner():
    msg = timeout_message(
        rank=5, step=Step(1, EXCHANGE, 3, 3, "reduce"), partner_rank=7, partner_node=3,
        waiting_for="data", seq=12, timeout_s=2.5,
    )  # fmt: skip
    assert "rank 5" in msg and "step 1 (exchange)" in msg and "partner rank 7" in msg
    assert "data" in msg and "timeout_s" in msg


# ------------------------------------------------------------------ tuning and params


@given(ncells=st.integers(0, 5000), chunk=st.integers(1, 700))
def test_chunk_bounds_cover_cells(ncells, chunk):
    bounds = chunk_bounds(ncells, chunk)
    covered = [i for a, b in bounds for i in range(a, b)]
    assert covered == list(range(ncells))
    assert all(0 < b - a <= chunk for a, b in bounds)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_shipped_tuning_tables_load(backend):
    table = load_table(backend)
    assert table.backend == backend and table.entries
    maxes = [m for m, _ in table.entries]
    assert maxes == sorted(maxes)
    assert table.lookup(1) == table.entries[0][1]
    assert table.lookup(2**40) == table.entries[-1][1]
    assert json.loads(table_path(backend).read_text())["entries"]


def test_tuning_lookup_and_overrides():
    table = parse_table({"backend": "x", "entries": [
        {"max_bytes": 1024, "chunk_bytes": 256, "blocks": 1, "threads": 32},
        {"max_bytes": 65536, "chunk_bytes": 4096, "blocks": 4, "threads": 128},
    ]})  # fmt: skip
    assert table.lookup(1024).chunk_bytes == 256
    assert table.lookup(1025).blocks == 4
    assert table.lookup(10**9).threads == 128  # past the last entry: the last entry
    t = with_overrides(table.lookup(10), {"chunk_bytes": 8, "timeout_s": 1.0})
    assert t == Tuning(8, 1, 32) and t.chunk_cells() == 2
    with pytest.raises(ValueError, match="malformed"):
        parse_table({"entries": [{"chunk_bytes": 4}]})
    with pytest.raises(ValueError, match="positive integer"):
        Tuning(0)


def test_params_parse_and_reject():
    p = parse_params({"timeout_s": "2.5", "chunk_bytes": 4096, "poll_sleep_us": 0})
    assert p["timeout_s"] == 2.5 and p["chunk_bytes"] == 4096 and p["poll_sleep_us"] == 0
    assert parse_params({})["timeout_s"] > 0
    with pytest.raises(ValueError, match="unknown nvrar parameter 'chunk'"):
        parse_params({"chunk": 1})
    with pytest.raises(ValueError, match="not a float"):
        parse_params({"timeout_s": "soon"})
    with pytest.raises(ValueError, match="must be positive"):
        parse_params({"timeout_s": 0})


def test_implementations_are_registered():
    assert lookup("allreduce", "nvrar").backends == ("cpu", "cuda")
    for name in ("ring", "recursive-doubling", "rabenseifner"):
        assert "cpu" in lookup("allreduce", name).backends


def test_benchmark_module_pure_parts(monkeypatch):
    from commbench.benchmarks import nvrar as bench

    for var in launch._LAUNCHED:
        monkeypatch.delenv(var, raising=False)
    assert not under_launcher()
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "8")
    assert under_launcher()
    args = bench.build_parser().parse_args([])
    assert (args.command, args.np, args.gpus_per_node, args.dtype) == ("table", 8, 4, "bf16")
    assert bench.SIZES[0] == 64 << 10 and bench.SIZES[-1] == 2 << 20
    cpu = bench.candidates("cpu")
    assert all(set(c) == {"chunk_bytes"} for c in cpu) and len(cpu) > 1
    gpu = bench.candidates("cuda")
    assert all(Tuning(c["chunk_bytes"], c["blocks"], c["threads"]) for c in gpu)


def test_cuda_kernel_names_and_source_agree():
    from commbench.kernels.nvrar import cuda

    assert cuda.recv_kernel_name(BF16, "max") == "ll8_recv<__nv_bfloat16, 2>"
    assert cuda.recv_kernel_name(np.dtype(np.int32), "sum") == "ll8_recv<int, 0>"
    src = cuda.KERNEL_SOURCE.read_text()
    for name in ("ll8_begin", "ll8_wait_credit", "ll8_pack", "ll8_recv"):
        assert f" {name}(" in src
    assert "(t - 1ull) % 0xFFFFFFFFull + 1ull" in src  # the flag rule of cells.seq_flag


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_cuda_kernels_compile_for_every_dtype_and_op(tmp_path):
    # No GPU needed: nvcc checks the CUDA source and every instantiation CuPy will ask for.
    from commbench.kernels.nvrar import cuda

    lines = [f'#include "{cuda.KERNEL_SOURCE}"']
    for ctype in cuda.CTYPES.values():
        for code in cuda.OPCODES.values():
            lines.append(
                f"template __global__ void ll8_recv<{ctype}, {code}>(const u64*, u64, "
                f"const {ctype}*, {ctype}*, u64, int, u64*, const u64*, long long, "
                "long long*, long long*, int, int);"
            )
    src = tmp_path / "inst.cu"
    src.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(
        ["nvcc", "-std=c++17", "-arch=sm_80", "-ptx", str(src), "-o", str(tmp_path / "o.ptx")],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    ptx = (tmp_path / "o.ptx").read_text()
    assert ptx.count(".entry") == 3 + 16
