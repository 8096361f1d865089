"""The ``mpi`` implementations on a "GPU" transport whose MPI is not GPU-aware (the PyPI
Open MPI wheel): device buffers are stand-ins without the buffer protocol, so MPI can only
reach them through the host staging; results are checked against numpy. Prints OK."""

import numpy as np

from commbench.harness.topology import Topology
from commbench.kernels.baselines.mpi import MpiAllreduce, MpiAlltoallv
from commbench.kernels.baselines.mpi_blocks import MpiAllgather, MpiBroadcast, MpiReduceScatter
from commbench.kernels.cases import AllreduceCase, AlltoallvCase, BlockCase


class DeviceArray:
    """A device buffer stand-in: CuPy's get/set, no buffer protocol for MPI to take."""

    def __init__(self, host: np.ndarray) -> None:
        self._a = host
        self.shape, self.dtype = host.shape, host.dtype

    def get(self, out=None, stream=None):
        out[...] = self._a
        return out

    def set(self, arr, stream=None) -> None:
        self._a[...] = arr


class FakeGpuTransport:
    name = "cuda"
    stream = None

    def __init__(self, topo) -> None:
        self.topo = topo

    def synchronize(self) -> None:
        pass


topo = Topology.create(gpus_per_node=1)
t = FakeGpuTransport(topo)
rank, size = topo.rank, topo.size

x = np.arange(1000, dtype=np.float32) * (rank + 1)
recv = DeviceArray(np.zeros(1000, np.float32))
case = AllreduceCase(DeviceArray(x.copy()), recv, 1000, np.dtype(np.float32), "sum")
impl = MpiAllreduce(t, {})
impl.setup(case)
impl.run(case)
want = np.arange(1000, dtype=np.float32) * sum(range(1, size + 1))
assert np.array_equal(recv._a, want), "staged allreduce"
assert impl.info()["mpi_buffers"].startswith(
    "staged through host memory (MPIX_Query_cuda_support() = 0"
)

traffic = np.array([[(u + 1) * 10 + v for v in range(size)] for u in range(size)], np.int64)
send = np.full(traffic[rank].sum(), rank, np.uint8)
recv = DeviceArray(np.zeros(traffic[:, rank].sum(), np.uint8))
case = AlltoallvCase(traffic, DeviceArray(send), recv, rank)
impl = MpiAlltoallv(t, {})
impl.setup(case)
impl.run(case)
want = np.concatenate([np.full(traffic[u, rank], u, np.uint8) for u in range(size)])
assert np.array_equal(recv._a, want), "staged alltoallv"

# all-gather, reduce-scatter, broadcast (root 1), out of place and in place (views)
c, f32 = 5, np.dtype(np.float32)
for inplace in (False, True):
    full = np.full(c * size, -1.0, np.float32)
    mine = np.arange(c, dtype=np.float32) + 100 * rank
    send = DeviceArray(full[rank * c : (rank + 1) * c] if inplace else mine.copy())
    if inplace:
        send.set(mine)
    case = BlockCase("allgather", send, DeviceArray(full), c, f32, rank, size, inplace=inplace)
    impl = MpiAllgather(t, {})
    impl.setup(case)
    impl.run(case)
    want = np.concatenate([np.arange(c, dtype=np.float32) + 100 * r for r in range(size)])
    assert np.array_equal(full, want), f"staged allgather inplace={inplace}"

    data = np.arange(c * size, dtype=np.float32) * (rank + 1)
    out = data[rank * c : (rank + 1) * c] if inplace else np.zeros(c, np.float32)
    case = BlockCase("reducescatter", DeviceArray(data), DeviceArray(out), c, f32, rank, size,
                     inplace=inplace)  # fmt: skip
    impl = MpiReduceScatter(t, {})
    impl.setup(case)
    impl.run(case)
    total = np.arange(c * size, dtype=np.float32) * sum(range(1, size + 1))
    assert np.array_equal(out, total[rank * c : (rank + 1) * c]), f"staged rs inplace={inplace}"

    buf = np.full(c, 7.0 if rank == 1 else -1.0, np.float32)
    src = buf if inplace else np.full(c, 7.0 if rank == 1 else 3.0, np.float32)
    recv = buf if inplace else np.zeros(c, np.float32)
    case = BlockCase("broadcast", DeviceArray(src), DeviceArray(recv), c, f32, rank, size,
                     root=1, inplace=inplace)  # fmt: skip
    impl = MpiBroadcast(t, {})
    impl.setup(case)
    impl.run(case)
    assert np.array_equal(recv, np.full(c, 7.0, np.float32)), f"staged bcast inplace={inplace}"
topo.free()
if rank == 0:
    print("OK")
