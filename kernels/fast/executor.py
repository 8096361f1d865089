"""Run a FAST per-rank plan on a transport: the same code for MPI, NCCL and RCCL.

A :class:`~commbench.kernels.fast.plan.RankPlan` lists, step by step, the sends, receives and
local copies of one rank (balance; intra-server traffic with rail step 0; rail step j
with the redistribution of rail step j - 1 out of the other staging buffer; the last
drain). :class:`PlanExecutor` turns it, once per bind, into per-step lists of
``(peer, buffer slice)`` pairs bound to the caller's send / receive buffers and to its own
scratch buffers (up front, or step by step during the run: ``bind(once=True)``), and
:meth:`PlanExecutor.run` then posts and waits:

* ``cpu``: each step is one batch of MPI ``Isend``/``Irecv`` plus ``numpy`` copies, then
  ``Waitall``: stage j + 1's rail transfers are in flight while stage j is redistributed;
* ``cuda`` / ``rocm``: each step is one ``ncclGroupStart/End`` holding the step's rail
  transfers and redistribution sends / receives, followed by its device copies on the
  same stream (stream order is the credit that lets a staging buffer be reused).

By default (``groups="world"``) node and rail peers are translated to world ranks so a
step is one group on one communicator; ``groups="split"`` posts node ops on the node
communicator and rail ops on the rail communicator (one group each; with NCCL the two
groups run one after the other on the stream, which is why it is not the default). Both
match the same messages: two ranks that share a node and a rail are the same rank.

Stages as rounds (``sync="rail"``, the default on ``cpu``): before each rail step after
the first, the ranks of a rail (one per server, the same local index) meet in a barrier,
so stage k + 1 starts nowhere on the rail before stage k has ended everywhere on it. A
stage is incast-free only as a round: without the barrier a rank that finished stage k
early starts stage k + 1 while its receiver still receives stage k from someone else,
two senders share one NIC and the delays chain to the end of the call (on the emulated
4x2 cluster, uniform 4 MiB: 311-314 ms with the barrier, 388-486 without, fan-out
311-325). ``sync="none"`` posts each step as soon as the rank's previous one completed
(the GPU backends': a host barrier between NCCL groups would stall the stream).

Before anything is sent, :func:`load` checks the schedule against the case (same traffic
matrix, same node size, a plan that reads the whole send buffer once and writes the
whole receive buffer once, within every buffer) and makes every rank agree on a
fingerprint of the traffic matrix: a mismatch on any rank raises the same ``ValueError``
on every rank instead of a hang.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from commbench.kernels import timeline
from commbench.kernels.fast import plan as P
from commbench.kernels.transport import bind_copy, bind_posts, slices, start_ranges

GROUPINGS = ("world", "split")
SYNCS = ("rail", "none")


# ---------------------------------------------------------------- checks (pure)


def plan_problem(
    plan: P.RankPlan, nranks: int, gpus_per_node: int, send_bytes: int, recv_bytes: int
) -> str | None:
    """Why ``plan`` cannot run on a rank with these buffers, or None.

    Checks op kinds, groups and peers, that every op stays inside its buffer, that the
    reads from the send buffer cover it exactly once and the writes into the receive
    buffer cover it exactly once (what ``MPI_Alltoallv`` reads and writes)."""
    ops = plan.ops
    if ops.dtype != P.OP_DTYPE:
        return f"plan ops have dtype {ops.dtype}, expected {P.OP_DTYPE}"
    g = int(gpus_per_node)
    servers = nranks // g
    if len(ops):
        step, kind, group, peer = ops["step"], ops["kind"], ops["group"], ops["peer"]
        nbytes = ops["nbytes"]
        if (nbytes <= 0).any():
            return f"op {int(np.argmax(nbytes <= 0))} moves {int(nbytes.min())} bytes"
        if (step < 0).any() or (step >= plan.nsteps).any() or (np.diff(step) < 0).any():
            return f"op steps are not sorted within 0..{plan.nsteps - 1}"
        if not np.isin(kind, (P.SEND, P.RECV, P.COPY)).all():
            return f"unknown op kind in {sorted(set(kind.tolist()))}"
        p2p = kind != P.COPY
        node, rail = p2p & (group == P.NODE), p2p & (group == P.RAIL)
        if (p2p & ~node & ~rail).any():
            return "a send or receive outside the node and rail groups"
        if (node & ((peer < 0) | (peer >= g))).any():
            return f"a node peer outside 0..{g - 1}: the plan is for another node size"
        if (rail & ((peer < 0) | (peer >= servers))).any():
            return f"a rail peer outside 0..{servers - 1}: the plan is for another rank count"
        limits = np.zeros(len(P.BUFFER_NAMES), dtype=np.int64)
        limits[P.SEND_BUF], limits[P.RECV_BUF] = send_bytes, recv_bytes
        for buf, size in plan.buffer_bytes.items():
            limits[buf] = size
        for side, mask, forbidden in (("src", kind != P.RECV, P.RECV_BUF),
                                      ("dst", kind != P.SEND, P.SEND_BUF)):  # fmt: skip
            buf, off = ops[f"{side}_buf"][mask], ops[f"{side}_off"][mask]
            if ((buf < 0) | (buf >= len(limits)) | (buf == forbidden)).any():
                return f"an op's {side} buffer is not one it may use"
            end = off + nbytes[mask]
            if ((off < 0) | (end > limits[buf])).any():
                i = int(np.argmax((off < 0) | (end > limits[buf])))
                return (f"an op's {side} range [{int(off[i])}, {int(end[i])}) is outside the "
                        f"{int(limits[buf[i]])}-byte {P.BUFFER_NAMES[buf[i]]} buffer")  # fmt: skip
    reads = (ops["kind"] != P.RECV) & (ops["src_buf"] == P.SEND_BUF)
    writes = (ops["kind"] != P.SEND) & (ops["dst_buf"] == P.RECV_BUF)
    if not _tiles(ops["src_off"][reads], ops["nbytes"][reads], send_bytes):
        return f"the plan does not read the {send_bytes}-byte send buffer exactly once"
    if not _tiles(ops["dst_off"][writes], ops["nbytes"][writes], recv_bytes):
        return f"the plan does not write the {recv_bytes}-byte receive buffer exactly once"
    return None


def _tiles(offsets: np.ndarray, sizes: np.ndarray, total: int) -> bool:
    """Do the ranges ``[offset, offset + size)`` cover ``[0, total)`` exactly once?"""
    if offsets.size == 0:
        return total == 0
    order = np.argsort(offsets, kind="stable")
    off, n = offsets[order], sizes[order]
    return bool(off[0] == 0 and (off[1:] == off[:-1] + n[:-1]).all() and off[-1] + n[-1] == total)


def schedule_problem(schedule, traffic: np.ndarray, gpus_per_node: int, rank: int,
                     send_bytes: int, recv_bytes: int) -> str | None:  # fmt: skip
    """Why ``schedule``'s plan for ``rank`` does not fit this all-to-allv, or None."""
    traffic = np.asarray(traffic)
    if schedule.nranks != traffic.shape[0]:
        return (f"the schedule is for {schedule.nranks} ranks but the traffic matrix has "
                f"{traffic.shape[0]}")  # fmt: skip
    if schedule.gpus_per_node != gpus_per_node:
        return (f"the schedule is for {schedule.gpus_per_node} GPUs per node but the "
                f"topology has {gpus_per_node}")  # fmt: skip
    if not np.array_equal(schedule.traffic, traffic):
        i, j = np.argwhere(schedule.traffic != traffic)[0]
        return (f"the schedule was computed for another traffic matrix (entry [{i}][{j}] is "
                f"{schedule.traffic[i, j]} there, {traffic[i, j]} here)")  # fmt: skip
    row, col = int(traffic[rank].sum()), int(traffic[:, rank].sum())
    if (send_bytes, recv_bytes) != (row, col):
        return (f"rank {rank}'s buffers hold {send_bytes} / {recv_bytes} bytes but the traffic "
                f"matrix says it sends {row} and receives {col}")  # fmt: skip
    return plan_problem(schedule.plan(rank), schedule.nranks, gpus_per_node, row, col)


def fingerprint(traffic: np.ndarray, *extra: int) -> int:
    """A 63-bit hash of the matrix (and of ``extra`` integers such as the node size)."""
    d = np.ascontiguousarray(traffic, dtype=np.int64)
    h = hashlib.blake2b(digest_size=8)
    h.update(np.array([*d.shape, *extra], dtype=np.int64).tobytes())
    h.update(d.tobytes())
    return int.from_bytes(h.digest(), "little") >> 1


def agree(comm: Any, problem: str | None, print_: int, what: str = "all-to-allv") -> None:
    """Collective over ``comm`` (mpi4py): raise the same ``ValueError`` on every rank when
    a rank has a problem or the ranks' fingerprints differ; return on every rank otherwise."""
    views = comm.allgather((problem, int(print_)))
    prints = [f for _, f in views]
    if len(set(prints)) > 1:
        other = next(r for r, f in enumerate(prints) if f != prints[0])
        raise ValueError(
            f"{what}: ranks hold different traffic matrices (rank 0 and rank {other} differ): "
            "every rank must pass the same P x P matrix"
        )
    bad = [(r, p) for r, (p, _) in enumerate(views) if p]
    if bad:
        more = (
            f" (and {len(bad) - 1} more rank{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
        )
        raise ValueError(f"{what}: rank {bad[0][0]} refuses the plan: {bad[0][1]}{more}")


# ---------------------------------------------------------------- the executor


class PlanExecutor:
    """Runs bound per-rank plans on ``transport``; owns the scratch buffers.

    Scratch buffers only grow (one per kind: balance, two staging, tail), so binding
    plan after plan, as :func:`load` or a per-call scheduler does, allocates nothing once
    the largest traffic has been seen.

    Binding is split in two: :meth:`bind` sorts the plan's ops into posting order and
    resolves peers and buffers for all of them at once (one call of the numba core, no
    per-op Python work; none at all when the plan comes with that order, made in the
    scheduler's own call for this executor's :attr:`posting`). By default :meth:`bind`
    then binds every step's posts (persistent requests on ``cpu``) and copies once and
    every :meth:`run` reuses them (``fast``: one plan, many runs). ``bind(..., once=True)``
    (``fast+sched``: a new plan every call) leaves the steps to :meth:`run`, which posts
    each step's messages from their buffer offsets (``start_ranges``: no slice per
    message where the transport can), reads step j + 1's offsets while step j is in
    flight and frees step j's (lists and requests) while step j + 1 is in flight - the
    last step's during the next run's first - so neither sits before a plan's first
    message or after its last."""

    def __init__(self, transport: Any, groups: str = "world", sync: str | None = None) -> None:
        if groups not in GROUPINGS:
            raise ValueError(f"groups must be one of {', '.join(GROUPINGS)}, got {groups!r}")
        cpu = getattr(transport, "name", None) == "cpu"
        sync = ("rail" if cpu else "none") if sync is None else sync
        if sync not in SYNCS:
            raise ValueError(f"sync must be one of {', '.join(SYNCS)}, got {sync!r}")
        if sync == "rail" and not cpu:
            raise ValueError("sync=rail is for the cpu backend (a host barrier between a GPU "
                             "backend's groups would stall its stream): use sync=none")  # fmt: skip
        self.transport = transport
        self.groups = groups
        self.sync = sync
        topo = transport.topo
        #: what the posting order depends on (world ranks or group ranks, this rank's
        #: node base and local index): ``Scheduler(..)(traffic, rank, posting=...)``
        self.posting = (groups == "world", topo.node * topo.gpus_per_node, topo.local)
        self._scratch: dict[int, Any] = {}
        self._steps: list[tuple[tuple, tuple]] = []  # every step, bound by bind (not once)
        self._once = False
        self._spent: tuple | None = None  # once: the last step run, freed during the next
        self._bounds: list[list[int]] = []  # per non-empty step: its class boundaries
        self._cols = np.zeros((6, 0), np.int64)  # the ops in posting order (see bind)
        self._bufs: list = []
        self._syncs: list[int] = [0]  # rail barriers before each bound step, then after the last

    @property
    def scratch_bytes(self) -> int:
        """Bytes of scratch memory this executor holds."""
        return int(sum(int(a.nbytes) for a in self._scratch.values()))

    @property
    def nsteps(self) -> int:
        """Non-empty steps of the bound plan."""
        return len(self._bounds)

    def bind(self, plan: P.RankPlan, send: Any, recv: Any, once: bool = False) -> None:
        """Prepare ``plan`` on these buffers (byte arrays of the transport); no checks:
        :func:`load` validates first. ``once``: the plan is run once - cut the buffer
        slices during :meth:`run`, step by step, and free them as it goes (see the class
        docstring)."""
        t = self.transport
        for buf, need in plan.buffer_bytes.items():
            have = self._scratch.get(buf)
            if need > 0 and (have is None or have.size < need):
                self._scratch[buf] = t.empty(int(need), np.uint8)
        bufs = [None] * len(P.BUFFER_NAMES)
        bufs[P.SEND_BUF], bufs[P.RECV_BUF] = send, recv
        for buf, array in self._scratch.items():
            bufs[buf] = array
        self._bufs = bufs
        self._once = once
        order = plan.order
        if order is not None and order[0] == self.posting:  # made with the plan, for us
            cols, bounds = order[1], order[2]
        else:
            world, node_base, local = self.posting
            rows = np.ascontiguousarray(plan.ops).view(np.int64).reshape(-1, len(P.OP_FIELDS))
            cols, bounds = _bind_order()(rows, plan.nsteps, world, node_base,
                                         t.topo.gpus_per_node, local)  # fmt: skip
        self._cols, self._bounds = cols, bounds.tolist()
        self._syncs = self._rounds(plan, bounds)
        self._steps = [] if once else [self._bind_step(i) for i in range(len(self._bounds))]

    def _rounds(self, plan: P.RankPlan, bounds: np.ndarray) -> list[int]:
        """Rail barriers to hold before each bound (non-empty) step and, last, after them:
        one before every rail step after the first (plan steps 2 .. nsteps - 2), the same
        count on every rank of a rail whichever of its steps are empty. A bound step's
        first op (``bounds[:, 0]``) is also its first in the plan's step-sorted ops, which
        names its plan step; a few us per bind (``fast+sched`` binds every call)."""
        nbound = len(bounds)
        out = [0] * (nbound + 1)
        if self.sync != "rail" or plan.nsteps < 4:
            return out
        present = plan.ops["step"][bounds[:, 0]].tolist()
        j = 0
        for step in range(2, plan.nsteps - 1):
            while j < nbound and present[j] < step:
                j += 1
            out[j] += 1
        return out

    def _ranges(self, i: int) -> tuple[tuple, tuple]:
        """Step ``i``: its posts, ``(group, sends, recvs)`` with the messages as byte ranges
        of the buffers (``kernels.transport.Ranges``), and its copies as buffer slices."""
        b = self._bounds[i]
        peer, buf, lo, hi, dbuf, doff = self._cols[:, b[0] : b[5]].tolist()
        bufs = self._bufs
        o = [x - b[0] for x in b]
        copies = tuple((bufs[dbuf[j]][doff[j] : doff[j] + hi[j] - lo[j]], bufs[buf[j]][lo[j] : hi[j]])
                       for j in range(o[4], o[5]))  # fmt: skip

        def ops(a: int, z: int) -> tuple:
            return peer[a:z], buf[a:z], lo[a:z], hi[a:z]

        if self.groups == "split":
            posts = tuple((name, ops(o[c], o[c + 1]), ops(o[c + 2], o[c + 3]))
                          for name, c in (("node", P.NODE), ("rail", P.RAIL))
                          if o[c + 1] > o[c] or o[c + 3] > o[c + 2])  # fmt: skip
        else:
            posts = (("world", ops(0, o[2]), ops(o[2], o[4])),) if o[4] else ()
        return posts, copies

    def _bind_step(self, i: int) -> tuple[tuple, tuple]:
        """Step ``i`` bound once: its posts' starts (persistent requests on ``cpu``) and
        its copies, calls of no arguments."""
        posts, copies = self._ranges(i)
        t, bufs = self.transport, self._bufs
        starts = tuple(bind_posts(t, slices(bufs, s), slices(bufs, r), group).start
                       for group, s, r in posts)  # fmt: skip
        return starts, tuple(bind_copy(t, dst, src) for dst, src in copies)

    def run(self) -> None:
        """One all-to-allv: per step, post its sends and receives, copy, wait."""
        if self._once:
            self._run_once()
            return
        tl = timeline.active()  # --timeline: per step, its post, copy and wait spans
        syncs = self._syncs
        for i, (starts, copies) in enumerate(self._steps):
            if syncs[i]:
                self._meet(syncs[i], tl, i)
            pending = [start() for start in starts]
            if tl:
                tl.mark("post", i)
            for copy in copies:
                copy()
            if tl and copies:
                tl.mark("copy", i)
            for p in pending:
                p.wait()
            if tl:
                tl.mark("wait", i)
        if syncs[-1]:
            self._meet(syncs[-1], tl, len(self._steps))

    def _meet(self, rounds: int, tl, step: int) -> None:
        """``rounds`` barriers of the rail (:meth:`_rounds`); a ``collective`` span."""
        for _ in range(rounds):
            self.transport.barrier("rail")
        if tl:
            tl.mark("collective", step)

    def _run_once(self) -> None:
        """:meth:`run` of a plan bound ``once``: each step posted from its buffer offsets;
        the next step's read and the previous step's freed before waiting."""
        t, bufs = self.transport, self._bufs
        tl = timeline.active()
        n = len(self._bounds)
        step = self._ranges(0) if n else None
        syncs = self._syncs
        for i in range(n):
            if syncs[i]:
                self._meet(syncs[i], tl, i)
            posts, copies = step
            pending = [start_ranges(t, bufs, s, r, group) for group, s, r in posts]
            if tl:
                tl.mark("post", i)
            for dst, src in copies:
                t.copy(dst, src)
            if tl and copies:
                tl.mark("copy", i)
            self._spent = None  # the step before this one, freed while this one moves
            if i + 1 < n:
                step = self._ranges(i + 1)
            for p in pending:
                p.wait()
            if tl:
                tl.mark("wait", i)
            self._spent = (posts, copies, pending)
        if syncs[-1]:
            self._meet(syncs[-1], tl, n)


def _bind_order():
    """The numba core's :func:`~commbench.kernels.fast._core.bind_order` (numba loads on first use)."""
    from commbench.kernels.fast.scheduler import _core_fn

    return _core_fn("bind_order")


def load(
    executor: PlanExecutor, schedule, case, problem: str | None = None, what: str = "fast"
) -> None:
    """Check ``schedule`` against ``case`` on every rank, agree, then bind this rank's plan.

    Collective over the world communicator. ``problem``: a reason this rank already
    has to refuse (e.g. the scheduler rejected its matrix); ``what`` names the caller in
    the message. Raises ``ValueError`` on
    every rank, before anything is sent, if any rank refuses or the ranks' traffic
    matrices differ."""
    topo = executor.transport.topo
    traffic = np.asarray(case.traffic)
    send_bytes, recv_bytes = int(case.send.nbytes), int(case.recv.nbytes)
    if problem is None:
        problem = schedule_problem(schedule, traffic, topo.gpus_per_node, topo.rank,
                                   send_bytes, recv_bytes)  # fmt: skip
    agree(topo.world, problem, fingerprint(traffic, topo.gpus_per_node), what)
    executor.bind(schedule.plan(topo.rank), case.send, case.recv)
