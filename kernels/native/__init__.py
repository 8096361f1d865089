"""The native timed loop: ``cloop.c`` built with the MPI's own ``mpicc``, loaded with ctypes.

Python pays ~1-10 us per MPI call (argument parsing, buffer specifications, the interpreter
itself), which at small sizes is more than the library's own time. Two things need C:

- the ``mpi`` implementations time the library's collective with the loop in C
  (:func:`time_call`), so commbench reads what a C benchmark reads (nccl-tests' back-to-back
  loop, OSU's per-call timer with a barrier between calls);
- ``commbench run --reference c`` and ``make bench`` time the library's collective on the same
  buffers, counts and layout as the plug-in (:func:`library_call`), and the standalone program
  (:func:`build` with ``program=True``) times it with no Python in the process at all.

The library is compiled once per source, ``mpicc`` and MPI library into the cache
(``$COMMBENCH_CACHE``, else ``~/.cache/commbench``), under a file lock so ranks starting
together build it once.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

KINDS = {
    "allreduce": 0,
    "alltoall": 1,
    "alltoallv": 2,
    "allgather": 3,
    "reducescatter": 4,
    "broadcast": 5,
    "reduce": 6,
    "persistent": 7,
    "rounds": 8,
}
PIPELINED, LATENCY = 0, 1
MODES = {"pipelined": PIPELINED, "latency": LATENCY}
#: Clock reads in a pipelined loop: the per-iteration spread at < 1 % of a 0.4 us call.
TICKS = 64


class NativeUnavailable(RuntimeError):
    """The native loop cannot be built here (no ``mpicc``, no compiler); says why."""


class Call(ctypes.Structure):
    """``cb_call`` of ``cloop.c``, field for field."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("count", ctypes.c_int),
        ("send", ctypes.c_void_p),
        ("recv", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("op", ctypes.c_int),
        ("comm", ctypes.c_int),
        ("root", ctypes.c_int),
        ("inplace", ctypes.c_int),
        ("scounts", ctypes.c_void_p),
        ("sdispls", ctypes.c_void_p),
        ("rcounts", ctypes.c_void_p),
        ("rdispls", ctypes.c_void_p),
        ("nreq", ctypes.c_int),
        ("reqs", ctypes.c_void_p),
        ("nrounds", ctypes.c_int),
        ("first", ctypes.c_void_p),
        ("peer", ctypes.c_void_p),
        ("bytes", ctypes.c_void_p),
        ("is_send", ctypes.c_void_p),
        ("msg_comm", ctypes.c_void_p),
        ("offset", ctypes.c_void_p),
    ]

    def keep(self, *arrays: Any) -> Call:
        """Hold the arrays the pointers point into for as long as the call lives."""
        self._keep = getattr(self, "_keep", ()) + arrays
        return self


def address(buf: Any) -> int:
    """The address of a numpy or CuPy array's first element."""
    if isinstance(buf, np.ndarray):
        return buf.ctypes.data
    return int(buf.data.ptr)  # cupy.ndarray


def _int32(values: Any) -> np.ndarray:
    arr = np.ascontiguousarray(values, dtype=np.int64)
    if arr.size and (arr.max() > np.iinfo(np.int32).max or arr.min() < 0):
        raise ValueError("a count or displacement does not fit MPI's int: use smaller sizes")
    return arr.astype(np.int32)


def library_call(collective: str, case: Any, comm: Any) -> Call:
    """The MPI library's own ``collective`` on ``case``'s buffers (what ``mpi`` runs); in
    place (``case.inplace``) with ``MPI_IN_PLACE`` as MPI defines it (an in-place
    reduce-scatter leaves its block at the front of the buffer)."""
    from mpi4py import MPI

    from commbench.kernels.mpitypes import mpi_type_and_op

    call = Call(kind=KINDS[collective], comm=comm.py2f())
    call.send, call.recv = address(case.send), address(case.recv)
    inplace = bool(getattr(case, "inplace", False))
    if collective in ("allreduce", "reducescatter"):
        datatype, op = mpi_type_and_op(case.dtype, case.op)
        call.count, call.dtype, call.op = case.count, datatype.py2f(), op.py2f()
        call.inplace = inplace
        if inplace and collective == "reducescatter":
            call.recv = call.send
        return call
    if collective in ("allgather", "broadcast"):
        call.dtype = MPI.BYTE.py2f()
        call.count = case.count * np.dtype(case.dtype).itemsize
        call.inplace = inplace and collective == "allgather"
        if collective == "broadcast":  # one buffer: what every rank ends with
            call.send, call.root = call.recv, case.root
        return call
    call.dtype = MPI.BYTE.py2f()
    if collective == "alltoall":
        call.count = int(case.traffic[case.rank, 0])
        return call
    if collective != "alltoallv":
        raise ValueError(f"no library call for {collective!r} in the native loop")
    vectors = [_int32(v) for v in (case.sendcounts, case.sdispls, case.recvcounts, case.rdispls)]
    call.scounts, call.sdispls, call.rcounts, call.rdispls = (v.ctypes.data for v in vectors)
    return call.keep(*vectors)


def persistent_call(requests: list, comm: Any) -> Call:
    """``MPI_Startall`` + ``MPI_Waitall`` over persistent requests made in Python."""
    handles = np.array([r.py2f() for r in requests], dtype=np.int32)
    call = Call(kind=KINDS["persistent"], comm=comm.py2f(), nreq=len(requests))
    call.reqs = handles.ctypes.data
    return call.keep(handles, requests)


def rounds_call(rounds: list[list[tuple[bool, int, int, int, Any]]], send, recv, comm) -> Call:
    """Point-to-point rounds replayed from C: each round posts its sends, then its receives,
    and waits for all of them. A message is (is_send, peer, nbytes, byte offset into
    ``send`` or ``recv``, communicator)."""
    flat = [m for r in rounds for m in r]
    first = np.cumsum([0] + [len(r) for r in rounds]).astype(np.int32)
    is_send = np.array([m[0] for m in flat], dtype=np.int32)
    peer = np.array([m[1] for m in flat], dtype=np.int32)
    nbytes = _int32([m[2] for m in flat])
    offset = np.array([m[3] for m in flat], dtype=np.int64)
    comms = np.array([m[4].py2f() for m in flat], dtype=np.int32)
    call = Call(kind=KINDS["rounds"], comm=comm.py2f(), nrounds=len(rounds))
    call.send, call.recv = address(send), address(recv)
    arrays = (first, is_send, peer, nbytes, offset, comms)
    call.first, call.is_send, call.peer, call.bytes, call.offset, call.msg_comm = (
        a.ctypes.data for a in arrays
    )
    return call.keep(*arrays, send, recv)


class Timing(NamedTuple):
    """What a native loop measured: ``per_call_us`` (the mean), ``samples_us`` (latency:
    each call's us; None when pipelined) and ``ticks`` (pipelined: (us since the start, calls
    done) at each clock read, as :class:`commbench.harness.iterclock.IterationClock` gives)."""

    per_call_us: float
    samples_us: np.ndarray | None
    ticks: tuple[np.ndarray, np.ndarray] | None


def time_call(
    call: Call, iters: int, mode: str, warmup: int = 0, progress: np.ndarray | None = None
) -> Timing:
    """Time ``iters`` calls from C (after ``warmup`` untimed ones). ``progress`` (an int64
    array of one) counts finished calls while the loop runs. Collective over ``call``'s
    communicator."""
    lib = load()
    every = max(1, -(-iters // TICKS))
    out = np.zeros(iters if mode == "latency" else -(-iters // every))
    counter = progress if progress is not None else np.zeros(1, dtype=np.int64)
    err = lib.cb_time(
        ctypes.byref(call), iters, warmup, MODES[mode], every, out.ctypes.data,
        counter.ctypes.data,
    )  # fmt: skip
    if err:
        from mpi4py import MPI

        raise RuntimeError(f"native timed loop: MPI error {err}: {MPI.Get_error_string(err)}")
    if mode == "latency":
        return Timing(float(out.mean()), out, None)
    calls = np.minimum(np.arange(1, out.size + 1) * every, iters)
    return Timing(float(out[-1] / iters), None, (out, calls))


# ---------------------------------------------------------------- building


def find_mpicc() -> str:
    """The ``mpicc`` of the MPI library mpi4py loaded: ``$MPICC``, else the one beside that
    library (``<prefix>/bin/mpicc`` for ``<prefix>/lib/libmpi.so``), else the one on PATH."""
    if os.environ.get("MPICC"):
        return os.environ["MPICC"]
    lib = libmpi_path()
    if lib:
        beside = Path(lib).resolve().parent.parent / "bin" / "mpicc"
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    found = shutil.which("mpicc")
    if not found:
        raise NativeUnavailable(
            "no mpicc for the MPI library mpi4py loaded: set MPICC=/path/to/mpicc "
            "(the MPI's compiler wrapper; cc on Cray)"
        )
    return found


def libmpi_path() -> str | None:
    """The path of the libmpi mpi4py loaded (None when it cannot be told from the process map)."""
    from mpi4py import MPI  # noqa: F401  (loads libmpi)

    with open("/proc/self/maps") as fh:
        paths = {line.split()[-1] for line in fh if "/libmpi" in line and ".so" in line}
    names = sorted((p for p in paths if os.path.basename(p).startswith("libmpi")), key=len)
    return names[0] if names else None


def cache_dir() -> Path:
    root = os.environ.get("COMMBENCH_CACHE") or Path.home() / ".cache" / "commbench"
    return Path(root)


def build(program: bool = False) -> Path:
    """The shared library (or, ``program=True``, the standalone reference program), built
    when missing. ``NativeUnavailable`` saying why when it cannot be."""
    source = resources.files("commbench.kernels.native").joinpath("cloop.c").read_bytes()
    mpicc = find_mpicc()
    lib = libmpi_path() or ""
    stamp = f"{os.stat(lib).st_mtime_ns}" if lib else ""
    key = hashlib.sha256(source + f"{mpicc}\0{lib}\0{stamp}\0{program}".encode()).hexdigest()
    target = cache_dir() / f"cloop-{key[:16]}{'' if program else '.so'}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # ranks starting together build it once
        if target.exists():
            return target
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            src = Path(tmp) / "cloop.c"
            src.write_bytes(source)
            out = Path(tmp) / target.name
            flags = ["-DCB_MAIN"] if program else ["-shared", "-fPIC"]
            argv = [mpicc, "-O2", *flags, str(src), "-o", str(out)]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise NativeUnavailable(f"cannot run {mpicc}: {exc}") from None
            if proc.returncode:
                why = (proc.stderr or proc.stdout).strip().splitlines()
                raise NativeUnavailable(
                    f"{' '.join(argv[:1])} failed to build the native loop: "
                    f"{why[-1] if why else 'exit ' + str(proc.returncode)}"
                )
            os.replace(out, target)  # whole or not at all
    return target


@cache
def load() -> ctypes.CDLL:
    """The native loop's library (built on first use)."""
    lib = ctypes.CDLL(str(build()))
    lib.cb_time.restype = ctypes.c_int
    lib.cb_time.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    return lib


@cache
def unavailable_reason() -> str | None:
    """Why the native loop cannot be used here, or None when it can (builds it if needed)."""
    try:
        load()
    except (NativeUnavailable, OSError) as exc:
        return str(exc)
    return None


def write_points(path: Path, nranks: int, points: list[tuple[str, int, int, Any]]) -> None:
    """The standalone program's input: (collective, size_bytes, element bytes, traffic or
    None) per point (see ``cloop.c``'s ``main``)."""
    words = [nranks, len(points)]
    for collective, size, elem, traffic in points:
        words += [KINDS[collective], size, elem]
        if collective == "alltoallv":
            words += np.asarray(traffic, dtype=np.int64).ravel().tolist()
    np.asarray(words, dtype="<i8").tofile(path)
