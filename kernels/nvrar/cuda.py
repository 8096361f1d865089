"""NVRAR's inter-node step on NVIDIA GPUs: nvshmem4py symmetric memory + CuPy kernels.

Design choice (host-enqueued puts + CuPy polling kernels, not nvshmem's numba device API):

* the receive/reduce/pack work is plain CUDA C in ``ll8.cu``, compiled by CuPy's NVRTC
  with no NVSHMEM device headers or LTO device library to link, so it implements the
  exact cell layout and reductions that :mod:`commbench.kernels.nvrar.cells` / ``reduce`` pin down on
  the CPU and the GPU self-check compares against them;
* the puts and credit signals are nvshmem4py's documented host API on a stream
  (``nvshmem.core.put`` / ``signal_op``), which the NVSHMEM proxy turns into RDMA writes
  across nodes, in stream order after the kernel that produced the cells;
* the numba-cuda device bindings are newer and add numba-cuda + libnvshmem_device linking
  to the GPU stack; the cost of our choice is one host enqueue per chunk and step (a few
  µs) instead of a device-initiated put per thread block.

Chunks run on their own streams (forked from and joined back into the transport's
stream), so one chunk's put overlaps another chunk's polling and reduction. Everything
per call reads the sequence number from device memory and credits are counters
(``SIGNAL_ADD`` 1), so a run() captured in a CUDA graph replays correctly.

Timeouts: the kernels give up after ``timeout_s`` and record (kind, step, partner, seq)
in mapped host memory; :meth:`NvshmemRail.check` raises :class:`NvrarTimeout` from it.
It runs at the start and end of every call and from ``info()`` (the harness calls it after
each point), so a failed call is reported no later than the next one.
"""

from __future__ import annotations

import atexit
import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from commbench.kernels.doubling import Step, doubling_steps
from commbench.kernels.nvrar import cells
from commbench.kernels.nvrar.schedule import NvrarTimeout, timeout_message
from commbench.kernels.nvrar.tuning import Tuning, chunk_bounds

KERNEL_SOURCE = Path(str(files("commbench.kernels.nvrar"))) / "ll8.cu"
CTYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "int32": "int"}
OPCODES = {"sum": 0, "prod": 1, "max": 2, "min": 3}
#: NVSHMEM bootstraps in the order tried (see :func:`init_nvshmem`).
BOOTSTRAPS = ("emulated_mpi", "mpi")
#: At most this many chunks (streams) per call; larger messages get larger chunks.
MAX_CHUNKS = 8
_ERR_KIND = {1: "data", 2: "credit"}

_module_cache: dict[str, Any] = {}
_live_rails: list[NvshmemRail] = []


def ctype_of(dtype: np.dtype) -> str:
    return CTYPES[np.dtype(dtype).name]


def recv_kernel_name(dtype: np.dtype, op: str) -> str:
    return f"ll8_recv<{ctype_of(dtype)}, {OPCODES[op]}>"


def load_module() -> Any:
    """``ll8.cu`` compiled once per process (CuPy also caches the binary on disk)."""
    if "mod" not in _module_cache:
        import cupy

        from commbench.kernels.reduce import BF16

        names = [recv_kernel_name(np.dtype(n) if n != "bfloat16" else BF16, op)
                 for n in CTYPES for op in OPCODES]  # fmt: skip
        _module_cache["mod"] = cupy.RawModule(
            code=KERNEL_SOURCE.read_text(), options=("--std=c++17",), name_expressions=names
        )
    return _module_cache["mod"]


class StreamRef:
    """The CUDA stream protocol (``__cuda_stream__``) nvshmem4py's on-stream calls read."""

    def __init__(self, stream: Any) -> None:
        self.ptr = int(stream.ptr)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


def init_nvshmem(transport: Any) -> None:
    """Initialise NVSHMEM once per process on the transport's device, bootstrapped from
    mpi4py over the (node, local)-ordered world communicator, so PE == topology rank.

    ``emulated_mpi`` (a unique id broadcast over that communicator by mpi4py) is tried
    first: it needs nothing of NVSHMEM's MPI bootstrap plugin, which must match the MPI
    library mpi4py runs on (a mismatch, e.g. with the PyPI Open MPI, is undefined behaviour
    and can crash before any fallback). The plugin (``mpi``) is the fallback.
    """
    if _module_cache.get("nvshmem_ready"):
        return
    import nvshmem.core as nvshmem

    try:
        from cuda.core import Device
    except ImportError:  # cuda-python before cuda.core left "experimental"
        from cuda.core.experimental import Device
    dev = Device(transport.device_id)
    dev.set_current()
    comm = transport.topo.world
    errors = []
    for method in BOOTSTRAPS:
        try:
            nvshmem.init(device=dev, mpi_comm=comm, initializer_method=method)
        except Exception as exc:  # this bootstrap is not to be had here: the next one
            errors.append(f"{method}: {exc!r}")
            continue
        _module_cache["nvshmem_bootstrap"] = method
        break
    else:
        raise RuntimeError(f"NVSHMEM initialisation failed: {'; '.join(errors)}")
    if nvshmem.my_pe() != transport.topo.rank:
        raise RuntimeError(
            f"NVSHMEM PE {nvshmem.my_pe()} != topology rank {transport.topo.rank}: "
            "the bootstrap did not use the topology's world communicator"
        )
    _module_cache["nvshmem_ready"] = True
    atexit.register(_shutdown)


def nvshmem_bootstrap() -> str | None:
    """The bootstrap NVSHMEM was initialised with in this process (None: not yet)."""
    return _module_cache.get("nvshmem_bootstrap")


def _shutdown() -> None:
    import nvshmem.core as nvshmem

    for rail in list(_live_rails):
        rail.close()
    nvshmem.finalize()


class _ErrorRecord:
    """Where kernels report a timeout: ``claim`` (device word, the first failure wins) and
    ``host`` = {kind, step, partner, seq} in mapped pinned host memory, read without a sync."""

    def __init__(self) -> None:
        import cupy
        from cupy.cuda import runtime

        self._runtime = runtime
        self.claim = cupy.zeros(1, dtype=cupy.int64)
        self.ptr = runtime.hostAlloc(4 * 8, runtime.hostAllocMapped)
        self.host = np.ctypeslib.as_array((ctypes.c_longlong * 4).from_address(self.ptr))
        self.host[:] = 0
        self.device_ptr = runtime.pointerGetAttributes(self.ptr).devicePointer  # == ptr (UVA)

    def args(self) -> tuple[Any, np.uint64]:
        """The (claim, record) kernel arguments."""
        return self.claim, np.uint64(self.device_ptr)

    def free(self) -> None:
        self._runtime.freeHost(self.ptr)


@dataclass
class _Window:
    array: Any  # cupy uint64 array on the symmetric heap: [credits | recv | send]
    buffer: Any  # its nvshmem (cuda.core) Buffer
    layout: cells.RailLayout
    seq: Any  # cupy uint64[1], the call counter (device memory)
    views: dict = field(default_factory=dict)

    def sub(self, word: int, nwords: int) -> Any:
        """A cuda.core Buffer for words [word, word + nwords) (symmetric address)."""
        key = (word, nwords)
        found = self.views.get(key)
        if found is None:
            base = int(self.buffer.handle)
            found = type(self.buffer).from_handle(base + 8 * word, 8 * nwords)
            self.views[key] = found
        return found


class NvshmemRail:
    """Recursive doubling over the rail (same local index on every node) with LL8 cells."""

    def __init__(
        self, transport: Any, world_rank_of_node: Callable[[int], int], timeout_s: float
    ) -> None:
        import cupy
        import nvshmem.core as nvshmem

        init_nvshmem(transport)
        self.cp, self.nv = cupy, nvshmem
        topo = transport.topo
        self.stream = transport.stream
        self.nodes, self.node = topo.nodes, topo.node
        self.world_rank_of_node = world_rank_of_node
        self.timeout_s = float(timeout_s)
        self.steps: list[Step] = doubling_steps(self.nodes, self.node)
        mod = self.mod = load_module()
        # Resolved once: run() is the hot path (no name lookups, no new events per call).
        self._begin = mod.get_function("ll8_begin")
        self._wait_credit = mod.get_function("ll8_wait_credit")
        self._pack = mod.get_function("ll8_pack")
        from commbench.kernels.reduce import SUPPORTED_DTYPES

        self._recv = {
            (dtype, op): mod.get_function(recv_kernel_name(dtype, op))
            for dtype in SUPPORTED_DTYPES
            for op in OPCODES
        }
        self.err = _ErrorRecord()
        self._windows: dict[int, _Window] = {}
        self._streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(MAX_CHUNKS)]
        self._forked = cupy.cuda.Event(disable_timing=True)
        self._joined = [cupy.cuda.Event(disable_timing=True) for _ in range(MAX_CHUNKS)]
        self._barrier = topo.world.Barrier
        _live_rails.append(self)

    def prepare(self, ncells: int) -> _Window:
        """The symmetric window for ``ncells`` cells (collective over all PEs)."""
        found = self._windows.get(ncells)
        if found is not None:
            return found
        layout = cells.RailLayout(len(self.steps), ncells)
        words = layout.window_words + layout.send_words
        array = self.nv.array((words,), dtype="uint64")
        buffer, _, _ = self.nv.array_get_buffer(array)
        array.fill(0)
        w = _Window(array, buffer, layout, self.cp.zeros(1, dtype=self.cp.uint64))
        self.cp.cuda.Device().synchronize()
        self._barrier()  # every window is zeroed before anyone puts into it
        self._windows[ncells] = w
        return w

    def window_bytes(self) -> int:
        return sum(
            8 * (w.layout.window_words + w.layout.send_words) for w in self._windows.values()
        )

    def close(self) -> None:
        """Free the symmetric buffers (collective over all PEs)."""
        self.cp.cuda.Device().synchronize()
        for w in self._windows.values():
            self.nv.free_array(w.array)
        self._windows.clear()
        self.err.free()
        if self in _live_rails:
            _live_rails.remove(self)

    def check(self) -> None:
        """Raise the timeout a kernel recorded (reads host memory, no sync). The record is
        kept: after a timeout the partners' sequence numbers disagree, every later call
        raises too."""
        kind, step, partner, seq = (int(x) for x in self.err.host)
        if kind:
            raise NvrarTimeout(
                timeout_message(
                    rank=self.world_rank_of_node(self.node),
                    step=self.steps[step],
                    partner_rank=self.world_rank_of_node(partner),
                    partner_node=partner,
                    waiting_for=_ERR_KIND.get(kind, "?"),
                    seq=seq,
                    timeout_s=self.timeout_s,
                )
            )

    def _next_active(self, i: int) -> Step | None:
        for step in self.steps[i + 1 :]:
            if step.send_to is not None or step.recv_from is not None:
                return step
        return None

    def run(self, src: Any, dst: Any, dtype: np.dtype, op: str, tuning: Tuning) -> None:
        """``dst`` = reduction of ``src`` over the rail (``dst`` may be ``src``); async."""
        self.check()
        nv, pack = self.nv, self._pack
        n = src.size
        itemsize = dtype.itemsize
        epc = cells.elems_per_cell(itemsize)
        ncells = cells.cell_count(n, itemsize)
        w = self._windows[ncells]
        lay = w.layout
        timeout_ns = np.int64(self.timeout_s * 1e9)
        claim, record = self.err.args()
        grid, block = (tuning.blocks,), (tuning.threads,)
        recv_kernel = self._recv[(dtype, op)]
        pe = self.world_rank_of_node
        main = self.stream

        with main:
            self._begin((1,), (1,), (w.seq,))
            for step in self.steps:
                if step.send_to is not None:
                    self._wait_credit(
                        (1,), (1,),
                        (w.array[step.index :], w.seq, timeout_ns, claim, record,
                         np.int32(step.index), np.int32(step.send_to)),
                    )  # fmt: skip
        chunk_cells = max(tuning.chunk_cells(), -(-ncells // MAX_CHUNKS))
        chunks = chunk_bounds(ncells, chunk_cells)
        self._forked.record(main)
        for c, (a, b) in enumerate(chunks):
            s = self._streams[c]
            s.wait_event(self._forked)
            e0, e1 = a * epc, min(b * epc, n)
            acc = src
            packed_step = None
            with s:
                for i, step in enumerate(self.steps):
                    if step.send_to is not None:
                        send_word = lay.window_words + lay.send_offset(step.index) + a
                        if packed_step != step.index:
                            pack(
                                grid, block,
                                (acc[e0:e1], np.uint64((e1 - e0) * itemsize),
                                 w.array[send_word:], np.uint64(b - a), w.seq, claim),
                            )  # fmt: skip
                        nv.put(
                            w.sub(lay.recv_offset(step.index) + a, b - a),
                            w.sub(send_word, b - a),
                            remote_pe=pe(step.send_to),
                            stream=StreamRef(s),
                        )
                    if step.recv_from is not None:
                        nxt = self._next_active(i)
                        fuse = nxt is not None and nxt.send_to is not None
                        next_ptr = (
                            w.array[lay.window_words + lay.send_offset(nxt.index) + a :]
                            if fuse
                            else np.uint64(0)
                        )
                        replace = step.combine == "replace"
                        recv_kernel(
                            grid, block,
                            (w.array[lay.recv_offset(step.index) + a :], np.uint64(b - a),
                             dst[e0:e1] if replace else acc[e0:e1], dst[e0:e1], np.uint64(e1 - e0),
                             np.int32(replace), next_ptr, w.seq, timeout_ns, claim, record,
                             np.int32(step.index), np.int32(step.recv_from)),
                        )  # fmt: skip
                        packed_step = nxt.index if fuse else None
                        acc = dst
        for c in range(len(chunks)):
            self._joined[c].record(self._streams[c])
            main.wait_event(self._joined[c])
        for step in self.steps:  # credits: this call's receive regions are consumed
            if step.recv_from is not None:
                nv.signal_op(
                    w.sub(step.index, 1),
                    1,
                    nv.SignalOp.SIGNAL_ADD,
                    remote_pe=pe(step.recv_from),
                    stream=StreamRef(main),
                )
        self.check()
