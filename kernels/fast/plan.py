"""The per-rank plan of a FAST schedule: what one rank posts, step by step.

A plan is one structured numpy array of *ops*, ordered by ``step`` and, within a step,
in posting order. Every op is a plain record:

=========  ======================================================================
field      meaning
=========  ======================================================================
step       0 = balance, 1 = intra-server traffic + rail step 0, j + 1 = rail step j
           + redistribution of rail step j - 1, last = redistribution of the last;
           with pipelined balancing (the scheduler's default) step 0 lends only what
           rail step 0 sends and step j + 1 also lends what rail step j + 1 sends
kind       ``SEND``, ``RECV`` or ``COPY`` (a local copy)
group      ``NODE`` (peer = local index), ``RAIL`` (peer = server index) or ``LOCAL``
peer       rank of the other side *in that group*; -1 for a copy
src_buf    buffer a SEND or COPY reads (``SEND_BUF``, ``BALANCE``, ``STAGE0``, ...)
src_off    byte offset in ``src_buf``
dst_buf    buffer a RECV or COPY writes (``RECV_BUF``, ``BALANCE``, ``STAGE0``, ...)
dst_off    byte offset in ``dst_buf``
nbytes     bytes moved (never 0)
=========  ======================================================================

``SEND_BUF`` and ``RECV_BUF`` are the caller's all-to-allv buffers in MPI_Alltoallv's
layout (send buffer ordered by destination rank, receive buffer by source rank,
displacements = exclusive prefix sums of the counts). The other buffers are scratch
owned by the executor, sized by :attr:`RankPlan.buffer_bytes`:

- ``BALANCE``: bytes received from node peers during balancing (held until sent); laid
  out the same whether lent in step 0 or step by step (a rail step reads ranges that
  earlier steps wrote, never the ones its own step's lending writes);
- ``STAGE0`` / ``STAGE1``: rail step j receives into ``STAGE{j % 2}`` and is drained
  (forwarded / copied) during step j + 1, so a buffer is written again only after the
  step that drained it completed - waiting for every op of a step before the next one
  is the credit;
- ``TAIL``: everything received in the fan-out tail (all servers at once), drained in
  the step after it: with ``tail="last"`` (the default) the tail is rail step
  ``len(stages)`` and its drain the last step; with ``tail="early"`` or a stage number
  k it is posted in stage k's step (next to that stage's rail messages) and drained in
  the next one, its lending (pipelined) one step before it.

A rail message that carries a single piece destined for the receiving rank itself is
received straight into ``RECV_BUF`` (always the case with one GPU per server).

Executor contract (cpu: MPI Isend/Irecv; cuda/rocm: one NCCL group per step): for each
step, post every SEND/RECV of the step (node ops on the node communicator, rail ops on
the rail communicator, in the order listed - messages between the same pair are
matched in posting order), do the step's COPYs, then wait for all. Ops of one step
never read what another op of the same step writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

SEND, RECV, COPY = 0, 1, 2
NODE, RAIL, LOCAL = 0, 1, 2
SEND_BUF, RECV_BUF, BALANCE, STAGE0, STAGE1, TAIL = 0, 1, 2, 3, 4, 5
BUFFER_NAMES = ("send", "recv", "balance", "stage0", "stage1", "tail")
SCRATCH_BUFFERS = (BALANCE, STAGE0, STAGE1, TAIL)

OP_FIELDS = (
    "step",
    "kind",
    "group",
    "peer",
    "src_buf",
    "src_off",
    "dst_buf",
    "dst_off",
    "nbytes",
)
OP_DTYPE = np.dtype([(name, np.int64) for name in OP_FIELDS])


@dataclass(frozen=True)
class RankPlan:
    """Everything one rank does for one all-to-allv under a FAST schedule."""

    rank: int
    ops: np.ndarray  # structured, dtype OP_DTYPE, sorted by step (stable)
    nsteps: int  # steps 0 .. nsteps - 1 (some may be empty for this rank)
    buffer_bytes: dict  # scratch buffer id -> bytes (BALANCE, STAGE0, STAGE1, TAIL)
    #: the ops already in an executor's posting order, made with the plan when the caller
    #: said where it runs (``Scheduler(..)(traffic, rank, posting=...)``): ``(posting,
    #: cols, bounds)`` as :meth:`PlanExecutor.bind` would compute them for that posting
    order: tuple | None = field(default=None, compare=False, repr=False)

    def steps(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(step, ops of that step)`` for every non-empty step, in order."""
        if len(self.ops) == 0:
            return
        bounds = np.flatnonzero(np.diff(self.ops["step"])) + 1
        for chunk in np.split(self.ops, bounds):
            yield int(chunk["step"][0]), chunk

    @property
    def extra_bytes(self) -> int:
        """Scratch memory this rank needs beyond its send and receive buffers."""
        return int(sum(self.buffer_bytes.values()))


def ops_view(rows: np.ndarray) -> np.ndarray:
    """View an (n, 9) int64 block (the ``OP_FIELDS`` columns) as structured ops."""
    if rows.dtype != np.int64 or not rows.flags.c_contiguous:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
    return rows.view(OP_DTYPE).reshape(-1)
