"""Per-iteration times of the timed loop, for the confidence interval of a point
(:mod:`commbench.analysis.intervals`): :func:`slowest_rank_samples` turns every rank's
stamps into the per-call times of the slowest rank.

On the ``cpu`` backend a call is done when it returns: the host clock is read after every
``every``-th call (at most :data:`CPU_TICKS` reads per point, as the native timed loop
does, so a read, ~0.1-0.2 µs with its bookkeeping, is not paid by every call of a
Python-level implementation), and each tick's time is the mean of the calls since the one
before. On GPU backends calls are queued on a stream: a CUDA/HIP event is recorded on it
after every ``every``-th call (at most :data:`GPU_TICKS` events per point, so the host
cost of recording, ~1-2 µs each, stays out of the way of the pipelined loop), and the
times from the first event to each later one are the stamps. The loop's own time
(``elapsed / calls``, nccl-tests' number) is unchanged.
"""

from __future__ import annotations

import numpy as np

#: Most events recorded per point on a GPU backend.
GPU_TICKS = 20
#: Most host clock reads per point on ``cpu`` (the native loop's ``TICKS``).
CPU_TICKS = 64


class IterationClock:
    """Stamps taken around the ``calls`` timed calls of one rank; :meth:`progress`."""

    def __init__(self, transport, calls: int, calls_per_tick: int = 1) -> None:
        self.t = transport
        self.calls = calls
        self.per_call = calls_per_tick  # e.g. -G: calls in one graph launch
        self.gpu = getattr(transport, "name", "cpu") != "cpu"
        self.every = max(1, -(-calls // (GPU_TICKS if self.gpu else CPU_TICKS)))
        self.ticks = -(-calls // self.every)
        self._done = 0
        self._left = self.every  # calls until the next tick
        self._calls_at = [0]
        if self.gpu:
            import cupy

            self._events = [cupy.cuda.Event() for _ in range(self.ticks + 1)]
        else:
            self._stamps = np.empty(self.ticks + 1)

    def start(self) -> None:
        self._mark(0)

    def tick(self) -> None:
        """After one timed call (or graph launch)."""
        self._left -= 1
        if self._left:
            return
        self._done = min(self._done + self.every, self.calls)
        self._left = min(self.every, self.calls - self._done)
        self._calls_at.append(self._done)
        self._mark(len(self._calls_at) - 1)

    def _mark(self, i: int) -> None:
        if self.gpu:
            self._events[i].record(self.t.stream)
        else:
            self._stamps[i] = self.t.now()

    def progress(self) -> tuple[np.ndarray, np.ndarray]:
        """``(µs since the start, calls done)`` at each tick (after the loop's
        synchronisation)."""
        n = len(self._calls_at)
        if self.gpu:
            import cupy

            ev = self._events
            since = [cupy.cuda.get_elapsed_time(ev[0], ev[i]) * 1e3 for i in range(1, n)]
        else:
            since = (self._stamps[1:n] - self._stamps[0]) * 1e6
        calls = np.asarray(self._calls_at[1:]) * self.per_call
        return np.asarray(since, dtype=float), calls


def latency_calls(iters: int) -> slice:
    """Where the ``iters`` timed calls of latency mode lie among the calls of its loop:
    the loop runs one more call each side, untimed, each after the same barrier and
    followed by the same bookkeeping as a timed call. Where ranks share cores, a rank done
    early with the loop's last call runs the harness's code after it (not yielding the
    core, as a rank waiting in MPI does) while the others still run theirs: on 8 ranks
    sharing 2 cores that call read 3.5-3.8x the others at 256 B and 1.9x at 4 KiB (15x
    and 4x in the C loop; ``python -m commbench.benchmarks.loop_edges``). The C loop does
    the same."""
    return slice(1, iters + 1)


def slowest_rank_samples(since_us: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """Per-call times of the job's critical path, one per tick.

    ``since_us[r, k]``: when rank r had done ``calls[k]`` calls, in µs since its own
    start (each rank starts its clock on leaving the same barrier, so the starts agree to
    within the barrier's skew, also across hosts whose clocks differ). The job has done
    ``calls[k]`` calls when its slowest rank has: ``E_k = max_r since_us[r, k]``, and
    ``(E_k - E_(k-1)) / (calls[k] - calls[k-1])`` is the per-call time of tick k. Their
    calls-weighted mean is the slowest rank's elapsed time over the calls (nccl-tests'
    time with -a 3).
    """
    ends = np.max(np.atleast_2d(np.asarray(since_us, dtype=float)), axis=0)
    done = np.asarray(calls, dtype=float)
    return np.diff(ends, prepend=0.0) / np.diff(done, prepend=0.0)
