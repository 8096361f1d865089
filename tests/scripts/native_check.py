"""Test-only, under mpiexec: the native loop moves the same bytes as mpi4py's calls.

For each kind of call (library all-reduce, all-to-all, all-to-allv; persistent requests;
point-to-point rounds), run it once through ``commbench.kernels.native.time_call`` and once
through mpi4py, and compare the receive buffers byte for byte. Prints one JSON line from
rank 0 with every check's verdict, the timing outputs' shapes and the progress counters.
"""

from __future__ import annotations

import json

import numpy as np
from mpi4py import MPI

from commbench.harness.collectives import alltoallv_send_data
from commbench.kernels import native
from commbench.kernels.cases import AllreduceCase, AlltoallvCase

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
rng = np.random.default_rng(7)
traffic = rng.integers(0, 300, (size, size))  # every rank draws the same matrix
checks: dict[str, bool] = {}

# all-reduce, float32 sum (and a user-defined reduction: bfloat16)
for dtype in ("float32", "bfloat16"):
    from commbench.kernels.reduce import BF16

    dt = np.dtype(np.float32) if dtype == "float32" else np.dtype(BF16)
    send = (np.arange(1000) % 7 + rank).astype(dt)
    case = AllreduceCase(send, np.zeros(1000, dt), 1000, dt, "sum")
    native.time_call(native.library_call("allreduce", case, comm), 1, "pipelined")
    expected = (np.arange(1000) % 7 * size + size * (size - 1) // 2).astype(dt)
    checks[f"allreduce-{dtype}"] = bool(np.array_equal(case.recv, expected))

# all-to-allv and all-to-all, against mpi4py's
case = AlltoallvCase(traffic, alltoallv_send_data(traffic, rank, 0),
                     np.zeros(int(traffic[:, rank].sum()), np.uint8), rank)  # fmt: skip
native.time_call(native.library_call("alltoallv", case, comm), 1, "latency")
theirs = np.zeros_like(case.recv)
comm.Alltoallv([case.send, (case.sendcounts, case.sdispls), MPI.BYTE],
               [theirs, (case.recvcounts, case.rdispls), MPI.BYTE])  # fmt: skip
checks["alltoallv"] = bool(np.array_equal(case.recv, theirs)) and case.recv.size > 0
uniform = np.full((size, size), 64)
case = AlltoallvCase(
    uniform, alltoallv_send_data(uniform, rank, 1), np.zeros(64 * size, np.uint8), rank
)
native.time_call(native.library_call("alltoall", case, comm), 1, "pipelined")
theirs = np.zeros_like(case.recv)
comm.Alltoall([case.send, MPI.BYTE], [theirs, MPI.BYTE])
checks["alltoall"] = bool(np.array_equal(case.recv, theirs))

# persistent requests made in Python, started from C: a ring shift
right, left = (rank + 1) % size, (rank - 1) % size
out, into = np.full(100, rank, np.uint8), np.zeros(100, np.uint8)
reqs = [comm.Recv_init([into, MPI.BYTE], source=left), comm.Send_init([out, MPI.BYTE], dest=right)]
progress = np.zeros(1, np.int64)
native.time_call(native.persistent_call(reqs, comm), 5, "pipelined", progress=progress)
checks["persistent"] = bool((into == left).all()) and int(progress[0]) == 5

# point-to-point rounds: round 1 to the right, round 2 back to the left, offsets distinct
send, recv = np.arange(40, dtype=np.uint8) + rank, np.zeros(40, np.uint8)
rounds = [
    [(False, left, 10, 0, comm), (True, right, 10, 0, comm)],
    [(False, right, 20, 10, comm), (True, left, 20, 20, comm)],
]
samples = native.time_call(
    native.rounds_call(rounds, send, recv, comm), 3, "latency", warmup=1
).samples_us
ticks = native.time_call(native.rounds_call(rounds, send, recv, comm), 200, "pipelined").ticks
checks["ticks"] = list(ticks[1][:2]) == [4, 8] and ticks[1][-1] == 200 and ticks[0][-1] > 0
expected = np.concatenate([np.arange(10) + left, (np.arange(20, 40) + right) % 256]).astype(
    np.uint8
)
checks["rounds"] = bool(np.array_equal(recv[:30], expected))

verdicts = comm.gather(checks)
if rank == 0:
    merged = {k: all(v[k] for v in verdicts) for k in checks}
    print(json.dumps({"checks": merged, "latency_samples": int(samples.size)}))
