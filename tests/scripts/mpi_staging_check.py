"""The ``mpi`` implementations on a "GPU" transport whose MPI is not GPU-aware (the PyPI
Open MPI wheel): device buffers are stand-ins without the buffer protocol, so MPI can only
reach them through the host staging; results are checked against numpy. Prints OK."""

import numpy as np

from commbench.harness.topology import Topology
from commbench.kernels.baselines.mpi import MpiAllreduce, MpiAlltoallv
from commbench.kernels.cases import AllreduceCase, AlltoallvCase


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
topo.free()
if rank == 0:
    print("OK")
