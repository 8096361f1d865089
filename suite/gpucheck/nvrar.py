"""``make gpu-check``'s NVRAR part (NVIDIA GPUs; called by :mod:`commbench.gpucheck.checks`).

* the LL8 kernels bit for bit against the CPU code (``kernels/nvrar/cells.py`` / ``kernels/reduce.py``), every
  dtype and op, on inputs with subnormals (CuPy compiles with ``-ftz=true``);
* their bandwidth as a fraction of a plain device-to-device copy timed in the same run;
* nvshmem4py on one PE: a sub-buffer put and a counter signal to itself (and which
  bootstrap initialised it);
* :meth:`NvshmemRail.run` itself on one PE, 2 and 4 rail "nodes" looped back to the PE
  (every put and credit goes to itself), plain and captured in a CUDA graph;
* two ranks on one GPU: whether NCCL and NVSHMEM accept it, and if NVSHMEM does, the
  rail between the two PEs.

The test data and the expected results are pure functions, tested on the CPU; everything
that needs CuPy imports it inside the function.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np

from commbench.errors import NotApplicable
from commbench.kernels.nvrar import cells
from commbench.kernels.reduce import BF16, OPS, SUPPORTED_DTYPES, reduce_into


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """How CuPy holds ``dtype`` on the device (bf16 and fp16 as uint16 bit patterns)."""
    return np.dtype(np.uint16) if dtype.itemsize == 2 else dtype


def check_inputs(dtype: np.dtype, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two operands of ``count`` elements. Floats mix four quarters: random normals,
    subnormals of both signs, near-cancelling pairs whose sum is subnormal, and subnormals
    times 0.75 or 1.5 (products rounded into the subnormal range). No zeros, NaNs or
    infinities, so max/min never see a tie or NaN."""
    rng = np.random.default_rng(seed)
    if dtype.kind == "i":
        return tuple(rng.integers(-(2**31), 2**31 - 1, count).astype(dtype) for _ in "xy")
    info = ml_dtypes.finfo(dtype)
    bits = np.dtype(f"uint{8 * dtype.itemsize}")
    sign = np.array(1 << (8 * dtype.itemsize - 1), dtype=np.uint64)

    def subnormals(n: int) -> np.ndarray:
        mant = rng.integers(1, 2**info.nmant, n, dtype=np.uint64)
        negative = rng.integers(0, 2, n, dtype=np.uint64).astype(bool)
        return np.where(negative, mant | sign, mant).astype(bits).view(dtype)

    q = count // 4
    tiny = float(info.smallest_normal)
    x = (rng.standard_normal(count) * 4).astype(dtype)
    y = (rng.standard_normal(count) * 4).astype(dtype)
    x[q : 2 * q], y[q : 2 * q] = subnormals(q), subnormals(q)
    near = (tiny * (1 + rng.random(q))).astype(dtype)
    x[2 * q : 3 * q] = near
    y[2 * q : 3 * q] = (-near.astype(np.float32) * np.float32(1 - 2.0**-3)).astype(dtype)
    x[3 * q : 4 * q] = subnormals(q)
    y[3 * q : 4 * q] = rng.choice(np.array([0.75, 1.5], dtype=dtype), q)
    return x, y


def loopback_expected(x: np.ndarray, dtype: np.dtype, op: str, nodes: int) -> np.ndarray:
    """What the rail leaves when every "node" is this PE: each of the log2(nodes) steps
    receives its own accumulator back, so ``acc = acc (op) acc`` per step."""
    if nodes < 2 or nodes & (nodes - 1):
        raise ValueError(f"loopback needs a power of two of at least 2 nodes, got {nodes}")
    acc = x.copy()
    with np.errstate(all="ignore"):
        for _ in range(nodes.bit_length() - 1):
            reduce_into(np, acc, acc, acc, op, dtype)
    return acc


def loopback_host(transport: Any, nodes: int, node: int = 0) -> SimpleNamespace:
    """What :class:`NvshmemRail` reads of a transport, with a rail of ``nodes`` nodes
    whatever the real world size (loopback: one PE plays every node)."""
    topo = transport.topo
    return SimpleNamespace(
        topo=SimpleNamespace(nodes=nodes, node=node, world=topo.world, rank=topo.rank),
        stream=transport.stream,
        device_id=transport.device_id,
    )


def _require_cuda() -> None:
    import cupy

    if getattr(cupy.cuda.runtime, "is_hip", False):
        raise NotApplicable("NVRAR's LL8 kernels and NVSHMEM are NVIDIA-only (ROCm GPU)")


# ---------------------------------------------------------------- checks (GPU)


def check_ll8_kernels(count: int = 4001) -> dict:
    """The LL8 kernels on one GPU against the CPU reference, bit for bit, every dtype and
    op, with subnormal inputs; a stale flag times out with step and partner recorded."""
    _require_cuda()
    import cupy

    from commbench.kernels.nvrar.cuda import _ErrorRecord, load_module, recv_kernel_name

    mod = load_module()
    pack = mod.get_function("ll8_pack")
    err = _ErrorRecord()
    claim, record = err.args()
    out: dict = {"count": count, "inputs": "normals, subnormals, subnormal sums and products"}
    t = 2**32  # flags wrap past zero here: flag 1
    seq = cupy.asarray(np.array([t], np.uint64))
    timeout = np.int64(2e9)
    for dtype in SUPPORTED_DTYPES:
        store = storage_dtype(dtype)
        for op in OPS:
            x, y = check_inputs(dtype, count, seed=7)
            want = np.empty_like(x)
            with np.errstate(all="ignore"):
                reduce_into(np, want, x, y, op, dtype)
            ncells = cells.cell_count(count, dtype.itemsize)
            recv = cupy.zeros(ncells, cupy.uint64)
            nxt = cupy.zeros(ncells, cupy.uint64)
            xd, yd = cupy.asarray(x.view(store)), cupy.asarray(y.view(store))
            outd = cupy.zeros_like(xd)
            pack((4,), (128,), (yd, np.uint64(y.nbytes), recv, np.uint64(ncells), seq, claim))
            ref_cells = np.zeros(ncells, np.uint64)
            cells.pack(np, y.view(store), cells.seq_flag(t), ref_cells)
            assert np.array_equal(cupy.asnumpy(recv), ref_cells), f"pack {dtype}"
            mod.get_function(recv_kernel_name(dtype, op))(
                (4,), (128,),
                (recv, np.uint64(ncells), xd, outd, np.uint64(count), np.int32(0), nxt, seq,
                 timeout, claim, record, np.int32(1), np.int32(3)),
            )  # fmt: skip
            got = cupy.asnumpy(outd)
            bits = np.dtype(f"uint{8 * dtype.itemsize}")  # -0.0 is not 0.0 here
            bad = np.flatnonzero(got.view(bits) != want.view(bits))
            assert not bad.size, (
                f"reduce {dtype} {op}: {bad.size} of {count} differ, first at {bad[0]}: "
                f"{x[bad[0]]!r} {op} {y[bad[0]]!r} = {got[bad[0] : bad[0] + 1].view(dtype)[0]!r}, "
                f"CPU {want[bad[0]]!r}"
            )
            cells.pack(np, want.view(store), cells.seq_flag(t), ref_cells)
            assert np.array_equal(cupy.asnumpy(nxt), ref_cells), f"fused pack {dtype} {op}"
            out[f"{dtype}/{op}"] = "bit-exact"
    stale = cupy.zeros(8, cupy.uint64)  # flag 0: never this call's
    dummy = cupy.zeros(8, cupy.float32)
    mod.get_function(recv_kernel_name(np.dtype(np.float32), "sum"))(
        (1,), (32,),
        (stale, np.uint64(8), dummy, dummy, np.uint64(8), np.int32(0), np.uint64(0), seq,
         np.int64(1e6), claim, record, np.int32(2), np.int32(5)),
    )  # fmt: skip
    cupy.cuda.Device().synchronize()
    assert [int(v) for v in err.host[:3]] == [1, 2, 5], f"timeout record {err.host}"
    out["timeout_record"] = "kind data, step 2, partner 5"
    err.free()
    return out


def check_ll8_bandwidth(nbytes: int = 256 << 20, reps: int = 20) -> dict:
    """Pack and receive+reduce of ``nbytes`` of fp32 data, each as a fraction of a plain
    device-to-device copy of the same bytes timed in the same run (events)."""
    _require_cuda()
    import cupy

    from commbench.kernels.nvrar.cuda import _ErrorRecord, load_module, recv_kernel_name

    mod = load_module()
    err = _ErrorRecord()
    claim, record = err.args()
    seq = cupy.asarray(np.array([1], np.uint64))
    n = nbytes // 4
    data = cupy.ones(n, cupy.float32)
    acc = cupy.ones(n, cupy.float32)
    region = cupy.zeros(n, cupy.uint64)
    copy_dst = cupy.empty_like(data)
    grid, block = (1024,), (512,)
    pack = mod.get_function("ll8_pack")
    recv = mod.get_function(recv_kernel_name(np.dtype(np.float32), "sum"))
    calls = {
        "copy": lambda: copy_dst.__setitem__(Ellipsis, data),
        "pack": lambda: pack(grid, block, (data, np.uint64(4 * n), region, np.uint64(n), seq, claim)),
        "recv_reduce": lambda: recv(
            grid, block,
            (region, np.uint64(n), acc, acc, np.uint64(n), np.int32(0), np.uint64(0), seq,
             np.int64(2e9), claim, record, np.int32(0), np.int32(0)),
        ),
    }  # fmt: skip
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    ms = {}
    for name, call in calls.items():
        call()  # warm (and pack the region the receive reads)
        start.record()
        for _ in range(reps):
            call()
        stop.record()
        stop.synchronize()
        ms[name] = cupy.cuda.get_elapsed_time(start, stop) / reps
    assert int(err.host[0]) == 0, f"the receive kernel timed out: {err.host}"
    err.free()
    copy_gbps = 2 * nbytes / (ms["copy"] * 1e-3) / 1e9  # read + write
    out = {"bytes": nbytes, "copy_GBps": copy_gbps}
    for name in ("pack", "recv_reduce"):
        out[f"{name}_us"] = ms[name] * 1e3
        # the same data bytes as the copy moves: the fraction of a copy's speed
        out[f"{name}_vs_copy"] = ms["copy"] / ms[name]
    out["note"] = "x_vs_copy = copy time / x time for the same data bytes (cells are 2x)"
    return out


def check_nvshmem_one_pe() -> dict:
    """nvshmem4py initialised from mpi4py on one PE; a sub-buffer put and a counter signal
    to itself through the same calls the NVRAR cuda path makes."""
    _require_cuda()
    import cupy

    from commbench.harness.backends import create_transport
    from commbench.harness.topology import Topology
    from commbench.kernels.nvrar.cuda import StreamRef, init_nvshmem, nvshmem_bootstrap

    topo = Topology.create(gpus_per_node=1)
    t = create_transport("cuda", topo)
    init_nvshmem(t)
    import nvshmem.core as nv

    arr = nv.array((1024,), dtype="uint64")
    buf, _, _ = nv.array_get_buffer(arr)
    arr[:512] = cupy.arange(512, dtype=cupy.uint64)
    arr[512:] = 0
    base = int(buf.handle)
    sub = type(buf).from_handle
    stream = StreamRef(t.stream)
    with t.stream:
        nv.put(sub(base + 8 * 600, 8 * 100), sub(base + 8 * 10, 8 * 100), remote_pe=nv.my_pe(),
               stream=stream)  # fmt: skip
        nv.signal_op(sub(base + 8 * 1000, 8), 1, nv.SignalOp.SIGNAL_ADD, remote_pe=nv.my_pe(),
                     stream=stream)  # fmt: skip
        nv.quiet(stream=stream)
    t.synchronize()
    host = cupy.asnumpy(arr)
    assert np.array_equal(host[600:700], np.arange(10, 110)), "sub-buffer put"
    assert int(host[1000]) == 1, "SIGNAL_ADD"
    result = {"pes": nv.n_pes(), "my_pe": nv.my_pe(), "version": str(nv.get_version()),
              "bootstrap": nvshmem_bootstrap()}  # fmt: skip
    nv.free_array(arr)
    t.close()
    return result


def _rail_round(rail, dtype: np.dtype, op: str, x: np.ndarray, tuning, calls: int) -> np.ndarray:
    """``calls`` runs of ``rail`` on device copies of ``x``; the result on the host."""
    import cupy

    store = storage_dtype(dtype)
    src = cupy.asarray(x.view(store))
    dst = cupy.zeros_like(src)
    rail.prepare(cells.cell_count(x.size, dtype.itemsize))
    for _ in range(calls):
        rail.run(src, dst, dtype, op, tuning)
    rail.stream.synchronize()
    rail.check()
    return cupy.asnumpy(dst).view(dtype)


def check_rail_loopback(count: int = 3001, timeout_s: float = 5.0) -> dict:
    """:meth:`NvshmemRail.run` on one PE: 2 and 4 rail nodes, all played by this PE (puts
    and credits to itself), every dtype and op, 3 calls in a row (sequence flags and
    credits advance), several chunks; then 3 calls captured in one CUDA graph, replayed
    twice. Bit for bit against :func:`loopback_expected`."""
    _require_cuda()
    from commbench.harness.backends import create_transport
    from commbench.harness.topology import Topology
    from commbench.kernels.nvrar.cuda import NvshmemRail
    from commbench.kernels.nvrar.tuning import Tuning

    topo = Topology.create(gpus_per_node=1)
    t = create_transport("cuda", topo)
    tuning = Tuning(chunk_bytes=1024, blocks=4, threads=128)  # several chunks per call
    out: dict = {"count": count}
    for nodes in (2, 4):
        rail = NvshmemRail(loopback_host(t, nodes), lambda node: topo.rank, timeout_s)
        for dtype in SUPPORTED_DTYPES:
            for op in OPS:
                x, _ = check_inputs(dtype, count, seed=nodes)
                got = _rail_round(rail, dtype, op, x, tuning, calls=3)
                want = loopback_expected(x, dtype, op, nodes)
                assert got.tobytes() == want.tobytes(), f"rail {nodes} nodes {dtype} {op}"
        out[f"nodes_{nodes}"] = "bit-exact, 16 dtype/op pairs x 3 calls"
        out[f"graph_nodes_{nodes}"] = _graph_loopback(rail, tuning, count, nodes)
        rail.close()
    t.close()
    return out


def _graph_loopback(rail, tuning, count: int, nodes: int) -> str:
    import cupy

    dtype, op = BF16, "sum"
    x, _ = check_inputs(dtype, count, seed=11)
    store = storage_dtype(dtype)
    src = cupy.asarray(x.view(store))
    dst = cupy.zeros_like(src)
    rail.prepare(cells.cell_count(count, dtype.itemsize))
    stream = rail.stream
    stream.begin_capture()
    try:
        for _ in range(3):
            rail.run(src, dst, dtype, op, tuning)
    finally:
        graph = stream.end_capture()
    for _ in range(2):
        graph.launch(stream)
    stream.synchronize()
    rail.check()
    want = loopback_expected(x, dtype, op, nodes)
    got = cupy.asnumpy(dst).view(dtype)
    assert got.tobytes() == want.tobytes(), f"graph-captured rail, {nodes} nodes"
    return "bit-exact, bf16 sum, 3 captured calls x 2 replays"


def check_two_pes_one_gpu(count: int = 2001, timeout_s: float = 5.0) -> dict:
    """Two ranks on one GPU (under ``mpiexec -n 2``): NCCL (which refuses duplicate
    GPUs - recorded, not a failure), then NVSHMEM with two PEs and, if it accepts them,
    :meth:`NvshmemRail.run` between them (2 rail nodes) bit for bit. NotApplicable when
    NVSHMEM refuses two PEs on one device."""
    _require_cuda()
    import cupy
    from mpi4py import MPI

    from commbench.harness.topology import Topology
    from commbench.kernels.nvrar.cuda import NvshmemRail, init_nvshmem, nvshmem_bootstrap
    from commbench.kernels.nvrar.tuning import Tuning

    world = MPI.COMM_WORLD
    if world.size != 2:
        raise RuntimeError(f"run under mpiexec -n 2 (world size is {world.size})")
    topo = Topology.create(gpus_per_node=1)  # two rail nodes of one GPU each
    cupy.cuda.Device(0).use()
    stream = cupy.cuda.Stream(non_blocking=True)
    out: dict = {"nccl": _try_nccl_pair(world, stream)}
    host = SimpleNamespace(topo=topo, stream=stream, device_id=0)
    try:
        init_nvshmem(host)
        accepted = 1
    except Exception as exc:  # the library's answer, reported
        out["nvshmem"] = f"refused: {exc!r}"
        accepted = 0
    if not world.allreduce(accepted, op=MPI.MIN):
        raise NotApplicable(f"NVSHMEM does not take two PEs on one GPU here: {out}")
    out["nvshmem"] = f"two PEs initialised (bootstrap {nvshmem_bootstrap()})"
    rail = NvshmemRail(host, lambda node: node, timeout_s)
    tuning = Tuning(chunk_bytes=1024, blocks=4, threads=128)
    for dtype in SUPPORTED_DTYPES:
        for op in OPS:
            mine, other = check_inputs(dtype, count, seed=13)
            if topo.rank == 1:
                mine, other = other, mine
            want = np.empty_like(mine)
            with np.errstate(all="ignore"):
                reduce_into(np, want, mine, other, op, dtype)
            got = _rail_round(rail, dtype, op, mine, tuning, calls=3)
            assert got.tobytes() == want.tobytes(), f"rank {topo.rank}: rail {dtype} {op}"
    out["rail"] = "bit-exact between 2 PEs on one GPU, 16 dtype/op pairs x 3 calls"
    rail.close()
    return out


def _try_nccl_pair(world, stream) -> str:
    from cupy.cuda import nccl

    uid = world.bcast(nccl.get_unique_id() if world.rank == 0 else None)
    try:
        comm = nccl.NcclCommunicator(world.size, uid, world.rank)
    except Exception as exc:
        return f"refused (expected: NCCL wants one GPU per rank): {exc!r}"
    comm.destroy()
    return "accepted a communicator of two ranks on one GPU"
