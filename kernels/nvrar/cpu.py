"""NVRAR's inter-node step on the CPU: one-sided MPI puts of LL8 cells into an RMA window.

One window per cell count, created once (collectively over the rail communicator: the
ranks with this local index, one per node) and reused by every later call of that size
without clearing: a receive region is ready when its cells carry this call's sequence
flag. Passive target (``Lock_all``) for the window's lifetime; ``Put`` to send; the
receiver polls its own window memory with ``Win.Sync()`` in the loop (the progress that
lands the puts, and MPI's own rule for reading a window) and yields the core when nothing has arrived (8 ranks
on 2 cores must not starve the sender); after ``YIELD_POLLS`` empty polls it sleeps
``poll_sleep_s`` between polls (param ``poll_sleep_us``, 0 = only yield), since on an
oversubscribed machine a yield alone hands the core back to the poller too often. A
chunk's data is unpacked from the same 8-byte reads that saw its flags (``Arrival``), so
no second ``Sync`` orders data after flags: each ``Sync`` runs MPI's progress engine, which
on an oversubscribed node yields the core (8 single-rank nodes, 256 B: a step 670-690 us
with it, 580-590 without, one launch).

No credit messages. Receive (and send) regions come in two sets, used by odd and even
calls (the sequence flag still tells calls apart): call t overwrites what call t-2 wrote,
so before sending in call t a rank must know that its receiver has consumed call t-2. In
this schedule every partner a rank sends to also sends to it (exchange steps pair up; a
fold-in sender gets the fold-out back), and a partner puts its call t-1 data only after
it finished its whole call t-2: the data a rank received in call t-1 is its credit for
call t. The paper sends an explicit credit per step for call t-1 with one set of regions
(kept on the GPU path); on the CPU over TCP each credit is one more put and its
acknowledgement through both ranks' progress engines (``run --timeline``: credit waits of
0.25-0.9 ms a call on 8 single-rank nodes, where a message costs ~0.15 ms).
``tests/test_nvrar_units.py`` checks that every schedule has the property.

No flush inside a call, as on the GPU: a step's puts are started and the rank goes on to
its own receive. Over TCP a ``Flush`` after every step cost a round trip to the target's
progress engine (``run --timeline``: 1-5 ms of "post" per step on 8 loaded single-rank
nodes). MPI still wants every RMA operation completed by a synchronisation call before
its origin buffer is reused, so each call begins by completing call t-2's puts, which
have landed by then (call t-1's data says so) and are usually already tested complete.
What the CPU transport cannot express: an MPI ``Put`` over TCP is an active message that
lands when the target's MPI progress engine runs (here inside its polling loop's MPI
calls), not by itself as an NVSHMEM put does; and its completion must be asked for, so a
rank whose puts are in flight tests them while it polls instead of sleeping.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from commbench.kernels import timeline
from commbench.kernels.doubling import Step, doubling_steps
from commbench.kernels.nvrar import cells
from commbench.kernels.nvrar.schedule import NvrarTimeout, timeout_message
from commbench.kernels.nvrar.tuning import Tuning, chunk_bounds
from commbench.kernels.reduce import reduce_into, storage

#: Receive (and send) regions alternate between calls: call t overwrites what call t-2
#: wrote, and the partner's call t-1 data proves it was read (see the module docstring).
PARITIES = 2
#: Polls that only yield before a waiting receiver starts sleeping between polls.
YIELD_POLLS = 20


@dataclass
class _Window:
    win: object  # mpi4py.MPI.Win
    words: np.ndarray  # the window memory as uint64
    send: np.ndarray  # local send cells, one region per step
    seen: np.ndarray  # the cells of the region being received, as read with their flags
    layout: cells.RailLayout
    seq: int = 0
    #: per call parity, the requests of its puts not yet known to be complete (``Rput``)
    pending: tuple[list, list] = field(default_factory=lambda: ([], []))


class Arrival:
    """Has chunk ``[a, b)`` of a receive region arrived? Cheap gate on the last cell's flag,
    then a scan that resumes from the first cell not yet seen ready.

    The scan reads a snapshot (each cell copied as one aligned 8-byte word into ``cells``,
    ``into`` when given: b - a words the caller reuses) and the data is taken from that
    snapshot, never re-read from the window: a cell whose flag was seen then carries its
    data in the same read, as the LL8 format promises, so no fence is needed between the
    flag and the data.
    """

    def __init__(
        self, region: np.ndarray, a: int, b: int, flag: int, into: np.ndarray | None = None
    ) -> None:
        self.region, self.start, self.pos, self.end, self.flag = region, a, a, b, flag
        self.last_flag = cells.flags(region[b - 1 : b])
        self.cells = np.empty(b - a, dtype=region.dtype) if into is None else into

    def __call__(self) -> bool:
        if int(self.last_flag[0]) != self.flag:
            return False
        seen = self.cells[self.pos - self.start :]
        np.copyto(seen, self.region[self.pos : self.end])
        self.pos += cells.ready_prefix(np, seen, self.flag)
        return self.pos == self.end


class MpiRail:
    """Recursive doubling over the rail communicator with LL8 cells in an MPI RMA window."""

    def __init__(
        self,
        rail_comm: object,
        world_rank_of_node: Callable[[int], int],
        timeout_s: float,
        poll_sleep_s: float = 20e-6,
    ) -> None:
        self.comm = rail_comm
        self.poll_sleep_s = poll_sleep_s
        self.nodes = rail_comm.Get_size()
        self.node = rail_comm.Get_rank()
        self.world_rank_of_node = world_rank_of_node
        self.timeout_s = float(timeout_s)
        self.steps: list[Step] = doubling_steps(self.nodes, self.node)
        self._windows: dict[int, _Window] = {}

    # -- set-up (collective over the rail) ------------------------------------------------
    def prepare(self, ncells: int) -> _Window:
        """The window for ``ncells`` cells, created on first use (collective)."""
        found = self._windows.get(ncells)
        if found is not None:
            return found
        from mpi4py import MPI

        layout = cells.RailLayout(PARITIES * len(self.steps), ncells)  # see _region
        win = MPI.Win.Allocate(
            layout.window_words * cells.CELL_BYTES, cells.CELL_BYTES, comm=self.comm
        )
        words = np.frombuffer(win.tomemory(), dtype=np.uint64)[: layout.window_words]
        words[:] = 0
        self.comm.Barrier()
        win.Lock_all(MPI.MODE_NOCHECK)
        w = _Window(
            win=win,
            words=words,
            send=np.zeros(layout.send_words, dtype=np.uint64),
            seen=np.empty(ncells, dtype=np.uint64),
            layout=layout,
        )
        self._windows[ncells] = w
        return w

    def window_bytes(self) -> int:
        return sum(w.layout.window_words * cells.CELL_BYTES for w in self._windows.values())

    def check(self) -> None:
        """Nothing to collect: on the CPU a timeout raises inside :meth:`run`."""

    def close(self) -> None:
        """End the access epochs and free the windows (collective over the rail)."""
        for w in self._windows.values():
            w.win.Unlock_all()
            w.win.Free()
        self._windows.clear()

    # -- one call -------------------------------------------------------------------------
    def run(
        self, src: np.ndarray, dst: np.ndarray, dtype: np.dtype, op: str, tuning: Tuning
    ) -> None:
        """``dst`` = reduction of ``src`` over the rail (``dst`` may be ``src``)."""
        from mpi4py import MPI

        n = src.size
        itemsize = dtype.itemsize
        epc = cells.elems_per_cell(itemsize)
        ncells = cells.cell_count(n, itemsize)
        w = self._windows[ncells]
        w.seq += 1
        t = w.seq
        parity = t % PARITIES
        flag = cells.seq_flag(t)
        chunks = chunk_bounds(ncells, tuning.chunk_cells())
        win = w.win
        u64 = MPI.UINT64_T

        tl = timeline.active()
        pending = w.pending[parity]
        if pending:  # call t-2's puts: complete before their origin buffers are reused
            MPI.Request.Waitall(pending)  # (landed: call t-1's data says so)
            pending.clear()
            if tl:
                tl.mark("wait")

        acc = src
        for step in self.steps:
            if step.send_to is not None:
                region = self._region(step, parity)
                out = w.send[w.layout.send_offset(region) :][:ncells]
                cells.pack(np, storage(acc, dtype), flag, out)
                if tl:
                    tl.mark("pack", step.index)
                base = w.layout.recv_offset(region)
                for a, b in chunks:
                    pending.append(
                        win.Rput([out[a:b], u64], step.send_to, target=(base + a, b - a, u64))
                    )
                if tl:
                    tl.mark("post", step.index)
            if step.recv_from is not None:
                offset = w.layout.recv_offset(self._region(step, parity))
                region = w.words[offset:][:ncells]
                for a, b in chunks:
                    arrival = Arrival(region, a, b, flag, w.seen[a:b])
                    self._wait(w, arrival, step, step.recv_from, "data", t)
                    if tl:
                        tl.mark("wait", step.index)
                    e0, e1 = a * epc, min(b * epc, n)
                    data = cells.unpack(np, arrival.cells, e1 - e0, itemsize)
                    if step.combine == "reduce":
                        reduce_into(np, dst[e0:e1], acc[e0:e1], data, op, dtype)
                    else:
                        storage(dst, dtype)[e0:e1] = data.view(storage(dst, dtype).dtype)
                    if tl:
                        tl.mark("reduce" if step.combine == "reduce" else "copy", step.index)
                acc = dst
        if acc is not dst:  # a single node: nothing to exchange
            dst[...] = src

    def _region(self, step: Step, parity: int) -> int:
        """Index of ``step``'s send / receive region in calls of this parity."""
        return step.index + parity * len(self.steps)

    def _wait(
        self, w: _Window, ready: Callable[[], bool], step: Step, partner: int, what: str, t: int
    ) -> None:
        from mpi4py import MPI

        deadline = time.monotonic() + self.timeout_s
        win = w.win
        pending = w.pending[w.seq % PARITIES]
        polls = 0
        while True:
            win.Sync()
            if ready():
                return
            if time.monotonic() > deadline:
                raise NvrarTimeout(
                    timeout_message(
                        rank=self.world_rank_of_node(self.node),
                        step=step,
                        partner_rank=self.world_rank_of_node(partner),
                        partner_node=partner,
                        waiting_for=what,
                        seq=t,
                        timeout_s=self.timeout_s,
                    )
                )
            # while this rank's own puts are in flight it tests them (MPI progress pushes
            # them out) and does not sleep
            if pending and MPI.Request.Testall(pending):
                pending.clear()
            polls += 1
            if pending or polls <= YIELD_POLLS or not self.poll_sleep_s:
                os.sched_yield()
            else:  # long wait: really leave the core to the ranks that must send
                time.sleep(self.poll_sleep_s)
