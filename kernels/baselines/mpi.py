"""The MPI library's own collectives through mpi4py (``MPI_Allreduce``, ``MPI_Alltoall(v)``).

On GPU backends the device buffers go straight to MPI when the library says it takes
device pointers (Cray MPICH with ``MPICH_GPU_SUPPORT_ENABLED=1``, Open MPI or MPICH built
with CUDA/ROCm: :func:`mpi_gpu_support`); otherwise every call stages them through host
memory (a copy each way, inside the timed call) and ``info()`` says so in the record. A
PyPI Open MPI wheel is built without CUDA support: handing it a device pointer crashes.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from commbench.kernels.cases import AllreduceCase, AlltoallvCase
from commbench.kernels.registry import register

#: ``MPIX_GPU_query_support``'s gpu_type (MPICH's mpi.h: CUDA 0, ZE 1, HIP 2).
_MPICH_GPU_TYPE = {"cuda": 0, "rocm": 2}
#: 16-bit floats have no MPI datatype; a user reduction would run on device pointers.
GPU_DTYPES = ("float32", "float64", "int32", "int64", "int8", "uint8")


def loaded_libmpi() -> Any:
    """The MPI library this process loaded (through mpi4py), as a ``ctypes.CDLL``."""
    from commbench.kernels.native import libmpi_path

    path = libmpi_path()
    return ctypes.CDLL(path) if path else ctypes.CDLL(None)


def mpi_gpu_support(flavour: str, lib: Any = None, environ: Any = None) -> tuple[bool, str]:
    """(whether MPI takes ``flavour`` ('cuda'/'rocm') device buffers, how that was decided).

    Asks the library (Open MPI's ``MPIX_Query_cuda_support`` / ``MPIX_Query_rocm_support``,
    MPICH's ``MPIX_GPU_query_support``), then Cray MPICH's ``MPICH_GPU_SUPPORT_ENABLED``;
    anything else counts as not GPU-aware (staging is slower, never wrong)."""
    lib = loaded_libmpi() if lib is None else lib
    environ = os.environ if environ is None else environ
    query = getattr(lib, f"MPIX_Query_{flavour}_support", None)
    if query is not None:
        query.restype = ctypes.c_int
        value = int(query())
        return value == 1, f"MPIX_Query_{flavour}_support() = {value}"
    by_type = getattr(lib, "MPIX_GPU_query_support", None)
    if by_type is not None:
        flag = ctypes.c_int(0)
        by_type.restype = ctypes.c_int
        by_type(ctypes.c_int(_MPICH_GPU_TYPE[flavour]), ctypes.byref(flag))
        return flag.value == 1, f"MPIX_GPU_query_support({flavour}) = {flag.value}"
    if environ.get("MPICH_GPU_SUPPORT_ENABLED") == "1":
        return True, "MPICH_GPU_SUPPORT_ENABLED=1"
    return False, "no GPU-support query in the MPI library"


class _Buffers:
    """Where MPI reads and writes: the case's own buffers, or host copies of device ones."""

    def __init__(self, transport) -> None:
        self.t = transport
        if transport.name == "cpu":
            self.staged, self.how = False, "host buffers"
        else:
            aware, how = mpi_gpu_support(transport.name)
            self.staged, self.how = not aware, how
        self._pairs: tuple = ()

    def bind(self, send, recv) -> tuple[Any, Any]:
        """The (send, recv) buffers to give MPI for this case."""
        if not self.staged:
            return send, recv
        hsend, hrecv = np.empty(send.shape, send.dtype), np.empty(recv.shape, recv.dtype)
        self._pairs = (send, hsend, recv, hrecv)
        return hsend, hrecv

    def before(self) -> None:
        """Wait for the device work that produced the send buffer (and copy it out)."""
        if self.staged:
            send, hsend, _, _ = self._pairs
            send.get(out=hsend, stream=self.t.stream)  # blocking: syncs the stream
        else:
            self.t.synchronize()

    def after(self) -> None:
        if self.staged:
            _, _, recv, hrecv = self._pairs
            recv.set(hrecv, stream=self.t.stream)

    def info(self) -> dict:
        where = "staged through host memory" if self.staged else "given to MPI directly"
        return {"mpi_buffers": f"{where} ({self.how})"}


class _Mpi:
    """The timed loop runs in C (:mod:`commbench.kernels.native`) unless the buffers are
    staged through host memory, the native loop cannot be built here, or ``--param
    loop=python`` asks for mpi4py's call in the harness's Python loop."""

    PARAMS = ("loop",)
    COLLECTIVE = ""

    def __init__(self, transport, params: dict) -> None:
        self.transport = transport
        self.buffers = _Buffers(transport)
        self.loop = params.get("loop", "native")
        if self.loop not in ("native", "python"):
            raise ValueError(f"--param loop={self.loop}: choose native or python")
        self._native = None
        self._loop_why = "asked for (--param loop=python)"

    def _bind_native(self, case) -> None:
        """The library call the native loop times, on the buffers MPI is given."""
        from commbench.kernels import native

        self._native = None
        if self.loop == "python":
            return
        if self.buffers.staged:
            self._loop_why = "device buffers are staged through host memory in each call"
            return
        reason = native.unavailable_reason()
        if reason:
            self._loop_why = reason
            return
        self._native = native.library_call(self.COLLECTIVE, case, self.transport.topo.world)

    def _type_and_op(self, case):
        """MPI's datatype and reduction for ``case``; refused for 16-bit floats on a GPU (a
        user-defined reduction would run on device pointers)."""
        from commbench.kernels.dtypes import dtype_name
        from commbench.kernels.mpitypes import mpi_type_and_op

        if self.transport.name != "cpu" and dtype_name(case.dtype) not in GPU_DTYPES:
            raise ValueError(
                "MPI has no device reduction for 16-bit floats: use -d float32 with "
                "--impl mpi on a GPU backend"
            )
        return mpi_type_and_op(case.dtype, case.op)

    def native_call(self, case):
        """What the harness times from C, or None to time :meth:`run` from Python."""
        return self._native

    def info(self) -> dict:
        loop = "native" if self._native is not None else f"python: {self._loop_why}"
        return {**self.buffers.info(), "mpi_timed_loop": loop}


@register("allreduce", "mpi", gpu_dtypes=GPU_DTYPES, capturable=False)
class MpiAllreduce(_Mpi):
    """MPI_Allreduce; fp16/bf16 through a user-defined reduction on the cpu backend."""

    COLLECTIVE = "allreduce"

    def setup(self, case: AllreduceCase) -> None:
        self._datatype, self._op = self._type_and_op(case)
        self._comm = self.transport.topo.world
        send, self._recv = self.buffers.bind(case.send, case.recv)
        self._send = [send, self._datatype]
        if case.inplace and not self.buffers.staged:  # send is recv: MPI takes IN_PLACE
            from mpi4py import MPI

            self._send = MPI.IN_PLACE
        self._bind_native(case)

    def run(self, case: AllreduceCase) -> None:
        self.buffers.before()
        self._comm.Allreduce(self._send, [self._recv, self._datatype], op=self._op)
        self.buffers.after()


@register("alltoall", "mpi", capturable=False)
class MpiAlltoall(_Mpi):
    """MPI_Alltoall: equal blocks to every rank."""

    COLLECTIVE = "alltoall"

    def setup(self, case: AlltoallvCase) -> None:
        from mpi4py import MPI

        counts = np.unique(case.traffic)
        if counts.size > 1:
            raise ValueError("alltoall needs uniform traffic: use alltoallv for a workload")
        self._byte = MPI.BYTE
        self._send, self._recv = self.buffers.bind(case.send, case.recv)
        self._bind_native(case)

    def run(self, case: AlltoallvCase) -> None:
        self.buffers.before()
        self.transport.topo.world.Alltoall([self._send, self._byte], [self._recv, self._byte])
        self.buffers.after()


@register("alltoallv", "mpi", capturable=False)
class MpiAlltoallv(_Mpi):
    """MPI_Alltoallv on byte buffers."""

    COLLECTIVE = "alltoallv"

    def setup(self, case: AlltoallvCase) -> None:
        from mpi4py import MPI

        byte = MPI.BYTE
        send, recv = self.buffers.bind(case.send, case.recv)
        self._send = [send, (case.sendcounts, case.sdispls), byte]
        self._recv = [recv, (case.recvcounts, case.rdispls), byte]
        self._bind_native(case)

    def run(self, case: AlltoallvCase) -> None:
        self.buffers.before()
        self.transport.topo.world.Alltoallv(self._send, self._recv)
        self.buffers.after()
