"""GPU transports: cupy buffers, NCCL (``cuda``) or RCCL (``rocm``) via ``cupy.cuda.nccl``.

CuPy's ROCm build exposes RCCL through the same ``cupy.cuda.nccl`` module, so one class
serves both; only the device-visibility variables and the library name differ. One NCCL
communicator per group (world, node, rail), each created from a unique id broadcast over
the matching MPI communicator. All work runs on one non-blocking stream; a posted group
completes in stream order, so :meth:`Pending.wait` needs no host synchronisation and
timing syncs the stream before reading the host clock.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from commbench.harness.topology import Topology
from commbench.kernels.dtypes import dtype_name

# ncclDataType_t values (nccl.h); bf16 is 9 since NCCL 2.10 (and in RCCL).
_NCCL_TYPES = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
    "uint16": 9,  # bf16 is stored as uint16 on the device (see empty()); no other use
}
_NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def gpu_unavailable_reason(flavour: str) -> str | None:
    """Why ``flavour`` ('cuda' or 'rocm') cannot run in this process, or None."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        from cupy.cuda import nccl
    except ImportError:
        return "CuPy was built without NCCL/RCCL"
    if not getattr(nccl, "available", True):
        return "CuPy cannot load the NCCL/RCCL library"
    is_hip = bool(getattr(cupy.cuda.runtime, "is_hip", False))
    if flavour == "cuda" and is_hip:
        return "this CuPy is the ROCm build: use --backend rocm"
    if flavour == "rocm" and not is_hip:
        return "this CuPy is the CUDA build: use --backend cuda"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        return f"no usable GPU ({exc})"
    return None if count > 0 else "no GPU is visible"


class _Stream:
    """Grouped operations are already ordered on the stream."""

    def wait(self) -> None:
        pass


class GpuTransport:
    """cupy + NCCL/RCCL; the device is chosen from the rank's index on its host."""

    xp = None  # set per instance to cupy

    def __init__(self, topo: Topology, flavour: str = "cuda") -> None:
        import cupy
        from cupy.cuda import nccl
        from mpi4py import MPI

        self.name = flavour
        self.topo = topo
        self.xp = cupy
        self._nccl = nccl
        host_comm = topo.world.Split_type(MPI.COMM_TYPE_SHARED, key=topo.rank)
        self.device_id = host_comm.rank % cupy.cuda.runtime.getDeviceCount()
        host_comm.Free()
        cupy.cuda.Device(self.device_id).use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream.use()
        self._comms = {
            "world": self._communicator(topo.world),
            "node": self._communicator(topo.node_comm),
            "rail": self._communicator(topo.rail_comm),
        }

    def _communicator(self, comm):
        uid = self._nccl.get_unique_id() if comm.rank == 0 else None
        uid = comm.bcast(uid, root=0)
        return self._nccl.NcclCommunicator(comm.size, uid, comm.rank)

    def describe(self) -> dict:
        cupy = self.xp
        props = cupy.cuda.runtime.getDeviceProperties(self.device_id)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        return {
            "device": f"{self.device_id}:{name}",
            "library": f"{'RCCL' if self.name == 'rocm' else 'NCCL'} {self._nccl.get_version()}",
            "driver": cupy.cuda.runtime.driverGetVersion(),
            "cupy": cupy.__version__,
        }

    # Buffers. bf16 lives as uint16 on the device (CuPy has no bf16 dtype); NCCL reads
    # uint16 as bf16 (the table above), and to_host(a, dtype) restores ml_dtypes' bf16.
    def _device_dtype(self, dtype) -> np.dtype:
        return np.dtype(np.uint16) if dtype_name(np.dtype(dtype)) == "bfloat16" else dtype

    def empty(self, count: int, dtype):
        return self.xp.empty(count, dtype=self._device_dtype(dtype))

    def zeros(self, count: int, dtype):
        return self.xp.zeros(count, dtype=self._device_dtype(dtype))

    def to_host(self, a, dtype=None) -> np.ndarray:
        host = self.xp.asnumpy(a, stream=self.stream)
        self.stream.synchronize()
        return host.view(dtype) if dtype is not None else host

    def from_host(self, a: np.ndarray):
        if dtype_name(a.dtype) == "bfloat16":
            a = a.view(np.uint16)
        return self.xp.asarray(a)

    def _type(self, a) -> int:
        return _NCCL_TYPES[dtype_name(np.dtype(a.dtype))]

    def start(
        self,
        sends: Sequence[tuple[int, object]],
        recvs: Sequence[tuple[int, object]],
        group="world",
    ) -> _Stream:
        comm = self._comms[group]
        nccl, stream = self._nccl, self.stream.ptr
        nccl.groupStart()
        try:
            for peer, buf in sends:
                comm.send(buf.data.ptr, buf.nbytes, nccl.NCCL_UINT8, peer, stream)
            for peer, buf in recvs:
                comm.recv(buf.data.ptr, buf.nbytes, nccl.NCCL_UINT8, peer, stream)
        finally:
            nccl.groupEnd()
        return _Stream()

    def start_ranges(self, bufs, sends, recvs, group="world") -> _Stream:
        """:meth:`start` of byte ranges of ``bufs`` (``kernels.transport.start_ranges``):
        each message a device pointer plus its offset, no slice per message."""
        comm = self._comms[group]
        nccl, stream = self._nccl, self.stream.ptr
        ptrs = [None if b is None else b.data.ptr for b in bufs]
        nccl.groupStart()
        try:
            for p, k, x, y in zip(*sends, strict=True):
                comm.send(ptrs[k] + x, y - x, nccl.NCCL_UINT8, p, stream)
            for p, k, x, y in zip(*recvs, strict=True):
                comm.recv(ptrs[k] + x, y - x, nccl.NCCL_UINT8, p, stream)
        finally:
            nccl.groupEnd()
        return _Stream()

    def exchange(self, sends, recvs, group: str = "world") -> None:
        self.start(sends, recvs, group).wait()

    def copy(self, dst, src) -> None:
        dst[...] = src

    def allreduce(self, send, recv, op="sum", group="world") -> None:
        self._comms[group].allReduce(
            send.data.ptr, recv.data.ptr, send.size, self._type(send),
            _NCCL_OPS[op], self.stream.ptr,
        )  # fmt: skip

    def reduce_scatter(self, send, recv, op="sum", group="node") -> None:
        self._comms[group].reduceScatter(
            send.data.ptr, recv.data.ptr, recv.size, self._type(send),
            _NCCL_OPS[op], self.stream.ptr,
        )  # fmt: skip

    def allgather(self, send, recv, group="node") -> None:
        self._comms[group].allGather(
            send.data.ptr, recv.data.ptr, send.nbytes, self._nccl.NCCL_UINT8, self.stream.ptr
        )

    def broadcast(self, send, recv, root=0, group="world") -> None:
        self._comms[group].broadcast(
            send.data.ptr, recv.data.ptr, recv.nbytes, self._nccl.NCCL_UINT8, root, self.stream.ptr
        )

    def barrier(self, group: str = "world") -> None:
        """Host barrier over ``group`` (nothing queued on the stream is waited for)."""
        self.topo.group(group).Barrier()

    def synchronize(self) -> None:
        self.stream.synchronize()

    def now(self) -> float:
        return time.perf_counter()

    def close(self) -> None:
        self.synchronize()
        for comm in self._comms.values():
            comm.destroy()
        self._comms = {}
