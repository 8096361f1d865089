"""Per-rank timeline of the timed calls (``commbench run --timeline``).

While the harness records (:func:`recording`), :func:`active` returns a
:class:`Recorder`; otherwise it returns None and an algorithm's hooks are one test of a
local variable against None per step (no clock read, no allocation): the default path
pays nothing measurable.

An algorithm marks the end of each piece of work with :meth:`Recorder.mark`: the span
runs from the end of the previous mark (or the call's start) to now, so the spans of one
call tile it without gaps and the interpreter's glue between two operations is charged to
the one after it. The harness closes each call with :meth:`Recorder.end` (a ``call``
span from the call's start to its measured end); what remains after the last mark (the
return, the harness's own clock read) is the only time not in a step's span.

Kinds (what a span spent its time on): ``post`` issuing sends and receives (MPI
``Isend``/``Irecv``/``Startall``, one-sided ``Put`` + ``Flush``), ``wait`` blocked until
posted transfers completed (``Waitall``) or a partner's data or credit arrived (NVRAR's
polling), ``copy`` local copies, ``reduce`` reductions, ``pack`` building NVRAR's LL8
cells, ``collective`` a library collective (MPI/NCCL), ``schedule`` scheduling inside the
call (``fast+sched``). ``step``: the algorithm's step or stage index, -1 outside steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

KINDS = ("post", "wait", "copy", "reduce", "pack", "collective", "schedule")
CALL = "call"
#: Column names of :meth:`Recorder.rows` (times in µs since the rank's timed loop began).
COLUMNS = ("call", "step", "kind", "start_us", "end_us")
#: The rank's own clock at its timed loop's start (µs): ``loop_start_us + start_us`` lines
#: the ranks up where they read one clock (``time.perf_counter`` is the host's
#: ``CLOCK_MONOTONIC``: the ranks of one machine, the emulated cluster's included); across
#: machines the clocks are unrelated.
LOOP_START = "loop_start_us"

_active: Recorder | None = None


def active() -> Recorder | None:
    """The recorder of the calls being timed, or None (no ``--timeline``)."""
    return _active


class Recorder:
    """Spans of one rank's timed calls; ``now`` is the transport's clock (seconds)."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self.now = now
        self.origin = 0.0
        self.call = -1
        self._start = self._last = 0.0
        self._spans: list[tuple[int, int, str, float, float]] = []

    def begin(self, call: int, t0: float) -> None:
        """Call ``call`` starts at clock time ``t0`` (the harness's own stamp)."""
        self.call, self._start, self._last = call, t0, t0

    def mark(self, kind: str, step: int = -1) -> None:
        """The span from the previous mark to now did ``kind`` work in ``step``."""
        t = self.now()
        self._spans.append((self.call, step, kind, self._last, t))
        self._last = t

    def end(self, t1: float) -> None:
        """The call ended at clock time ``t1`` (its measured end)."""
        self._spans.append((self.call, -1, CALL, self._start, t1))

    def rows(self) -> list[tuple[int, int, str, float, float]]:
        """Every span, times in µs since :attr:`origin` (the timed loop's start)."""
        o = self.origin
        return [(c, s, k, (a - o) * 1e6, (b - o) * 1e6) for c, s, k, a, b in self._spans]

    def loop_start_us(self) -> float:
        """:attr:`origin` on the clock itself, in µs (:data:`LOOP_START`)."""
        return self.origin * 1e6


def run_posts(plan, recorder: Recorder, step: int = -1) -> None:
    """``plan.run()`` (a :class:`~commbench.kernels.transport.Plan`) as a ``post`` span
    (starting the sends and receives) and a ``wait`` span; callers take this path only
    when recording, their default path stays ``plan.run()``."""
    pending = plan.start()
    recorder.mark("post", step)
    pending.wait()
    recorder.mark("wait", step)


#: :func:`traced_calls` entry whose work is a Plan: its ``post`` and ``wait`` spans
POSTS = "posts"


def traced_calls(steps) -> tuple[Callable[[], object], ...]:
    """The calls of no arguments an algorithm's default path runs, from the same
    ``(kind, step, work)`` entries :func:`run_traced` records: ``work`` is a Plan when
    ``kind`` is :data:`POSTS` (its ``run``), else a call of no arguments."""
    return tuple(work.run if kind == POSTS else work for kind, _, work in steps)


def run_traced(steps, recorder: Recorder) -> None:
    """Run the ``(kind, step, work)`` entries bound in an algorithm's setup as one call,
    each a span (a Plan: a ``post`` and a ``wait`` span, see :func:`run_posts`)."""
    for kind, step, work in steps:
        if kind == POSTS:
            run_posts(work, recorder, step)
        else:
            work()
            recorder.mark(kind, step)


@contextmanager
def recording(recorder: Recorder | None) -> Iterator[Recorder | None]:
    """Make ``recorder`` the :func:`active` one inside the block (None: record nothing)."""
    global _active
    previous, _active = _active, recorder
    try:
        yield recorder
    finally:
        _active = previous
