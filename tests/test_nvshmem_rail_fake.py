"""``NvshmemRail.run`` on fake ``cupy`` / ``nvshmem.core`` / ``cuda.core`` modules: the call
sequence a GPU would see (kernels, puts, credits, stream joins) for a 4-node rail, and the
hot path - no kernel look-ups and no new events per call. Data movement and the kernels'
arithmetic are `make gpu-check`'s (a GPU)."""

from __future__ import annotations

import ctypes
import sys
import types
from collections import Counter

import numpy as np
import pytest

from commbench.gpucheck.nvrar import loopback_host
from commbench.kernels.nvrar import cells
from commbench.kernels.nvrar.tuning import Tuning
from commbench.kernels.reduce import BF16


class Recorder:
    def __init__(self) -> None:
        self.calls: Counter = Counter()
        self.log: list[tuple] = []

    def __call__(self, what: str, *args) -> None:
        self.calls[what] += 1
        self.log.append((what, *args))


@pytest.fixture
def fakes(monkeypatch):
    rec = Recorder()
    keep: list = []

    class Stream:
        current: list = []

        def __init__(self, non_blocking: bool = False) -> None:
            self.ptr = 1000 + len(keep)
            keep.append(self)

        def __enter__(self):
            Stream.current.append(self)
            return self

        def __exit__(self, *exc) -> None:
            Stream.current.pop()

        def wait_event(self, event) -> None:
            rec("wait_event", self.ptr)

        def record(self, event=None):
            raise AssertionError("run() must record its pre-made events, not new ones")

        def synchronize(self) -> None:
            pass

    class Event:
        def __init__(self, disable_timing: bool = False) -> None:
            assert disable_timing, "events on the hot path need no timing"
            rec("new_event")

        def record(self, stream=None) -> None:
            rec("record", stream.ptr)

    class Kernel:
        def __init__(self, name: str) -> None:
            self.name = name

        def __call__(self, grid, block, args) -> None:
            stream = Stream.current[-1].ptr if Stream.current else None
            rec("kernel", self.name, stream)

    class RawModule:
        def __init__(self, code, options, name_expressions) -> None:
            assert "ll8_recv" in code and len(name_expressions) == 16

        def get_function(self, name: str) -> Kernel:
            rec("get_function", name)
            return Kernel(name)

    def host_alloc(nbytes, flags):
        buf = (ctypes.c_char * nbytes)()
        keep.append(buf)
        return ctypes.addressof(buf)

    runtime = types.SimpleNamespace(
        hostAlloc=host_alloc,
        hostAllocMapped=2,
        pointerGetAttributes=lambda ptr: types.SimpleNamespace(devicePointer=ptr),
        freeHost=lambda ptr: None,
    )
    device = types.SimpleNamespace(synchronize=lambda: None)
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.ModuleType("cupy.cuda")
    cupy.cuda.Stream, cupy.cuda.Event, cupy.cuda.runtime = Stream, Event, runtime
    cupy.cuda.Device = lambda *a: device
    cupy.RawModule = RawModule
    cupy.zeros = lambda n, dtype=None: np.zeros(n, dtype)
    cupy.uint64, cupy.int64 = np.uint64, np.int64

    class Buffer:
        def __init__(self, handle: int, size: int) -> None:
            self.handle, self.size = handle, size

        @classmethod
        def from_handle(cls, handle: int, size: int) -> Buffer:
            return cls(handle, size)

    nv = types.ModuleType("nvshmem.core")
    nv.init = lambda **kw: rec("init", kw["initializer_method"])
    nv.my_pe = lambda: 0
    nv.array = lambda shape, dtype: np.zeros(shape, dtype)
    nv.array_get_buffer = lambda a: (Buffer(a.ctypes.data, a.nbytes), a.nbytes, "uint64")
    nv.free_array = lambda a: rec("free_array")
    nv.SignalOp = types.SimpleNamespace(SIGNAL_ADD=0)
    nv.put = lambda dst, src, remote_pe, stream: rec("put", remote_pe, stream.ptr)
    nv.signal_op = lambda sig, value, op, remote_pe, stream: rec("signal", remote_pe, value)
    nv.finalize = lambda: None
    cuda_core = types.ModuleType("cuda.core")
    cuda_core.Device = lambda i: types.SimpleNamespace(set_current=lambda: None)
    for name, module in (("cupy", cupy), ("cupy.cuda", cupy.cuda),
                         ("nvshmem", types.ModuleType("nvshmem")),
                         ("nvshmem.core", nv), ("cuda", types.ModuleType("cuda")),
                         ("cuda.core", cuda_core)):  # fmt: skip
        monkeypatch.setitem(sys.modules, name, module)
    from commbench.kernels.nvrar import cuda

    monkeypatch.setattr(cuda, "_module_cache", {})
    monkeypatch.setattr(cuda, "_live_rails", [])
    monkeypatch.setattr(cuda.atexit, "register", lambda fn: None)
    return rec, Stream


def test_rail_run_call_sequence_and_hot_path(fakes):
    rec, Stream = fakes
    from commbench.kernels.nvrar.cuda import MAX_CHUNKS, NvshmemRail

    world = types.SimpleNamespace(Barrier=lambda: None)
    transport = types.SimpleNamespace(
        topo=types.SimpleNamespace(world=world, rank=0), stream=Stream(), device_id=0
    )
    rail = NvshmemRail(loopback_host(transport, nodes=4), lambda node: 0, timeout_s=1.0)
    assert rec.calls["get_function"] == 3 + 16
    assert rec.calls["new_event"] == 1 + MAX_CHUNKS
    count = 3000
    ncells = cells.cell_count(count, 2)
    rail.prepare(ncells)
    src = np.zeros(count, np.uint16)
    before = Counter(rec.calls)
    rail.run(src, src, BF16, "sum", Tuning(chunk_bytes=1024, blocks=2, threads=64))
    per_call = rec.calls - before
    chunks = -(-ncells // 256)  # 1024 B = 256 cells per chunk (fewer than MAX_CHUNKS here)
    assert chunks <= MAX_CHUNKS
    assert per_call["get_function"] == 0 and per_call["new_event"] == 0
    # 2 exchange steps; step 0's receive fuses the pack of step 1's send
    kernels = Counter(entry[1] for entry in rec.log[len(rec.log) - sum(per_call.values()) :]
                      if entry[0] == "kernel")  # fmt: skip
    assert kernels["ll8_begin"] == 1 and kernels["ll8_wait_credit"] == 2
    assert kernels["ll8_pack"] == chunks
    assert kernels["ll8_recv<__nv_bfloat16, 0>"] == 2 * chunks
    assert per_call["put"] == 2 * chunks and per_call["signal"] == 2
    assert per_call["record"] == 1 + chunks and per_call["wait_event"] == 2 * chunks
    rail.run(src, src, BF16, "max", Tuning(chunk_bytes=1024, blocks=2, threads=64))
    assert rec.calls["get_function"] == 3 + 16 and rec.calls["new_event"] == 1 + MAX_CHUNKS
    rail.close()
    assert rec.calls["free_array"] == 1
