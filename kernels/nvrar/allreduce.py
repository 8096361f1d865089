"""The registered ``nvrar`` all-reduce: the hierarchy around the inter-node LL8 step.

Per call: intra-node reduce-scatter (``transport.reduce_scatter`` on the node group:
MPI ``Reduce_scatter_block`` on cpu, NCCL on cuda; counts not divisible by G are padded),
the one-sided recursive doubling of the n/G-element segment among the ranks with the same
local index (:mod:`commbench.kernels.nvrar.cpu` / :mod:`commbench.kernels.nvrar.cuda`), then the intra-node
all-gather. G = 1 skips the intra-node steps, one node skips the inter-node one.

Params (``--param key=value``): ``timeout_s`` (default 10) how long a receiver waits for
a partner's data or credit before raising :class:`~commbench.kernels.nvrar.schedule.NvrarTimeout`
naming the step and the partner; ``chunk_bytes`` / ``blocks`` / ``threads`` override the
tuning table; ``poll_sleep_us`` (cpu, default 20, 0 = only yield) the sleep between polls
once a wait gets long. The timeout covers the inter-node step; a rank that never enters
the intra-node collectives is the harness watchdog's to catch.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from commbench.kernels import timeline
from commbench.kernels.cases import AllreduceCase
from commbench.kernels.doubling import doubling_steps, step_count
from commbench.kernels.nvrar import cells
from commbench.kernels.nvrar.schedule import padded_count
from commbench.kernels.nvrar.tuning import Tuning, load_table, with_overrides
from commbench.kernels.reduce import check_dtype, check_op
from commbench.kernels.registry import register

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_POLL_SLEEP_US = 20.0


PARAM_TYPES = {
    "timeout_s": float,
    "chunk_bytes": int,
    "blocks": int,
    "threads": int,
    "poll_sleep_us": float,
}


def parse_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """Typed NVRAR params from ``--param key=value`` strings; unknown keys are an error."""
    known = PARAM_TYPES
    out: dict[str, Any] = {}
    for key, value in (params or {}).items():
        if key not in known:
            raise ValueError(f"unknown nvrar parameter {key!r} (known: {', '.join(sorted(known))})")
        try:
            out[key] = known[key](value)
        except (TypeError, ValueError):
            raise ValueError(
                f"nvrar parameter {key}={value!r} is not a {known[key].__name__}"
            ) from None
        if out[key] < 0 or (out[key] == 0 and key != "poll_sleep_us"):
            raise ValueError(f"nvrar parameter {key} must be positive, got {value!r}")
    out.setdefault("timeout_s", DEFAULT_TIMEOUT_S)
    out.setdefault("poll_sleep_us", DEFAULT_POLL_SLEEP_US)
    return out


#: NVRAR's chunk streams each need a hardware queue: with ``CUDA_DEVICE_MAX_CONNECTIONS=1``
#: (H200/Perlmutter profiles, for NCCL) a chunk's next put queues behind its spinning
#: receive kernel and every later chunk's work behind that, so the chunks serialise.
GPU_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}


@register("allreduce", "nvrar", backends=("cpu", "cuda"), env=GPU_ENV)
class Nvrar:
    """NVRAR: intra-node reduce-scatter, inter-node LL8 recursive doubling, all-gather."""

    PARAMS = tuple(PARAM_TYPES)

    def __init__(self, transport: Any, params: dict[str, Any] | None = None) -> None:
        self.t = transport
        self.topo = transport.topo
        self.params = parse_params(params)
        self.table = load_table(transport.name)
        self.rail = None
        self.tuning: Tuning | None = None
        self._key: tuple | None = None

    def _make_rail(self) -> Any:
        topo = self.topo
        g, local = topo.gpus_per_node, topo.local

        def world_rank_of_node(node: int) -> int:
            return node * g + local

        if self.t.name == "cpu":
            from commbench.kernels.nvrar.cpu import MpiRail

            return MpiRail(
                topo.rail_comm,
                world_rank_of_node,
                self.params["timeout_s"],
                self.params["poll_sleep_us"] * 1e-6,
            )
        if self.t.name == "cuda":
            from commbench.kernels.nvrar.cuda import NvshmemRail

            return NvshmemRail(self.t, world_rank_of_node, self.params["timeout_s"])
        raise ValueError(f"nvrar has no {self.t.name!r} backend (use cpu or cuda)")

    def setup(self, case: AllreduceCase) -> None:
        dtype = check_dtype(case.dtype)
        check_op(case.op)
        g, nodes = self.topo.gpus_per_node, self.topo.nodes
        n = case.count
        npad = padded_count(n, g)
        seg = npad // g
        key = (n, dtype, case.send.dtype)
        self.tuning = with_overrides(self.table.lookup(seg * dtype.itemsize), self.params)
        if self._key != key:
            self._key = key
            self.npad, self.seg = npad, seg
            self.segbuf = self.t.empty(seg, case.send.dtype) if g > 1 else None
            padded = g > 1 and npad != n
            self.padsend = self.t.zeros(npad, case.send.dtype) if padded else None
            self.padrecv = self.t.empty(npad, case.send.dtype) if padded else None
        if nodes > 1 and n > 0:
            if self.rail is None:
                self.rail = self._make_rail()
            self.rail.prepare(cells.cell_count(seg, dtype.itemsize))

    def run(self, case: AllreduceCase) -> None:
        n = case.count
        if n == 0:
            return
        dtype = check_dtype(case.dtype)
        g = self.topo.gpus_per_node
        if g == 1:
            if self.rail is not None:
                self.rail.run(case.send, case.recv, dtype, case.op, self.tuning)
            else:
                self.t.copy(case.recv, case.send)
            return
        tl = timeline.active()
        rs_in = case.send
        if self.padsend is not None:
            self.t.copy(self.padsend[:n], case.send)
            rs_in = self.padsend
        self.t.reduce_scatter(rs_in, self.segbuf, case.op, "node")
        if tl:
            tl.mark("collective")  # the intra-node reduce-scatter
        if self.rail is not None:
            self.rail.run(self.segbuf, self.segbuf, dtype, case.op, self.tuning)
        ag_out = case.recv if self.padrecv is None else self.padrecv
        self.t.allgather(self.segbuf, ag_out, "node")
        if self.padrecv is not None:
            self.t.copy(case.recv, self.padrecv[:n])
        if tl:
            tl.mark("collective")  # the intra-node all-gather

    def info(self) -> dict[str, Any]:
        if self.rail is not None:
            self.rail.check()  # GPU: surface a timeout recorded by a kernel
        nodes = self.topo.nodes
        steps = doubling_steps(nodes, self.topo.node)
        return {
            "algorithm": "nvrar (RS + LL8 recursive doubling + AG)",
            "inter_node_steps": step_count(nodes),
            "inter_node_sends": sum(s.send_to is not None for s in steps),
            "tuning": None if self.tuning is None else asdict(self.tuning),
            "timeout_s": self.params["timeout_s"],
            "window_bytes": 0 if self.rail is None else self.rail.window_bytes(),
        }

    def close(self) -> None:
        """Free the one-sided buffers (collective); optional, the process exit frees them too."""
        if self.rail is not None:
            self.rail.close()
            self.rail = None
