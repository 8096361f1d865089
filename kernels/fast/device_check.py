"""``make gpu-check``'s FAST part: the executor's device copies and NCCL/RCCL groups on
one GPU (one rank), then the four all-to-allv implementations through the GPU transport.

Called by :func:`suite.gpucheck.check_fast_executor`; needs CuPy and a GPU (imports
inside the function, so plug-in discovery stays cheap).
"""

from __future__ import annotations

import numpy as np

from kernels.fast import plan as P

IMPLS = ("fast", "fast+sched", "balance-only", "spreadout")


def self_plan(nbytes: int, hop: int) -> P.RankPlan:
    """A two-step plan a single rank can run: the first ``hop`` bytes go to itself over
    the rail group into a staging buffer (step 0, with a device copy of the rest into the
    receive buffer), then from the staging buffer over the node group into place."""
    rows = [
        (0, P.SEND, P.RAIL, 0, P.SEND_BUF, 0, -1, 0, hop),
        (0, P.RECV, P.RAIL, 0, -1, 0, P.STAGE0, 0, hop),
        (0, P.COPY, P.LOCAL, -1, P.SEND_BUF, hop, P.RECV_BUF, hop, nbytes - hop),
        (1, P.SEND, P.NODE, 0, P.STAGE0, 0, -1, 0, hop),
        (1, P.RECV, P.NODE, 0, -1, 0, P.RECV_BUF, 0, hop),
    ]
    ops = np.array(rows, dtype=P.OP_DTYPE)
    sizes = {P.BALANCE: 0, P.STAGE0: hop, P.STAGE1: 0, P.TAIL: 0}
    return P.RankPlan(0, ops, 2, sizes)


def check_executor_on_one_gpu(backend: str, nbytes: int = 24 << 20, reps: int = 20) -> dict:
    """Byte-exact results and event-timed microseconds per call; AssertionError on a
    wrong byte."""
    import cupy

    from kernels.cases import AlltoallvCase
    from kernels.fast.executor import PlanExecutor, plan_problem
    from kernels.registry import lookup
    from suite.backends import create_transport
    from suite.topology import Topology

    topo = Topology.create(gpus_per_node=1)
    t = create_transport(backend, topo)
    host = (np.arange(nbytes, dtype=np.int64) * 7 % 251).astype(np.uint8)
    send = t.from_host(host)
    out: dict = {"nbytes": nbytes}

    def timed(fn) -> float:
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(t.stream)
        for _ in range(reps):
            fn()
        stop.record(t.stream)
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / reps * 1e3

    plan = self_plan(nbytes, nbytes // 3)
    assert plan_problem(plan, 1, 1, nbytes, nbytes) is None
    for groups in ("world", "split"):
        recv = t.zeros(nbytes, np.uint8)
        ex = PlanExecutor(t, groups)
        ex.bind(plan, send, recv)
        ex.run()
        got = t.to_host(recv)
        assert np.array_equal(got, host), f"executor ({groups} groups) moved wrong bytes"
        out[f"plan_{groups}_us"] = timed(ex.run)
    traffic = np.array([[nbytes]], dtype=np.int64)
    for name in IMPLS:
        case = AlltoallvCase(traffic, send, t.zeros(nbytes, np.uint8), 0, 1)
        impl = lookup("alltoallv", name).factory(t, {})
        impl.setup(case)
        impl.run(case)
        assert np.array_equal(t.to_host(case.recv), host), f"{name} moved wrong bytes"
        out[f"{name}_us"] = timed(lambda impl=impl, case=case: impl.run(case))
    t.close()
    topo.free()
    return out
