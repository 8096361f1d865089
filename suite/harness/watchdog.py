"""The run's watchdog: from launch to exit, a silent hang becomes an abort that says who
stopped and what every rank was doing.

Each rank's main thread names its *phase* (``phase("gathering point 3")``) and may hand
over the iterator of the loop it is in (``counting``); a background thread watches for
*progress* - a new phase or a step of that loop (read with ``operator.length_hint``, so a
timed loop pays nothing). A rank is *stuck* after ``seconds`` without progress; a slow
point whose calls keep returning is not.

Ranks on one machine share a heartbeat board (an MPI shared-memory window): every tick
each rank's thread stamps its slot with the time, its last progress and its phase. The
rank that reports a hang reads the board, so it can name the ranks whose stamp went stale
(stopped, swapped out or dead: they cannot speak for themselves) apart from those merely
waiting on them.

Until the board exists, MPI start-up may hold the interpreter lock (mpi4py initialises MPI
inside its import), so no Python thread could run: Python's :mod:`faulthandler` guards
that stretch instead, ending a rank stuck there after ``max(seconds, STARTUP_FLOOR_S)``
with a traceback of where it waited; it guards the way out (freeing the board, MPI
finalisation) the same way.
"""

from __future__ import annotations

import faulthandler
import operator
import os
import sys
import threading
import time

import numpy as np

PHASE_BYTES = 240
#: Shortest start-up guard: launching on a loaded machine is slow but not stuck.
STARTUP_FLOOR_S = 10.0
BOARD = np.dtype(
    [
        ("rank", np.int64),
        ("pid", np.int64),
        ("alive", np.float64),
        ("progress", np.float64),
        ("phase", f"S{PHASE_BYTES}"),
    ]
)


class Watchdog:
    """Start with :meth:`start`, mark phases, share heartbeats with :meth:`attach`, and
    :meth:`stop` at the end. ``seconds`` <= 0 turns it off (phases are then free)."""

    def __init__(self, seconds: float, prefix: str = "commbench run") -> None:
        self.seconds = float(seconds)
        self.prefix = prefix
        self.tick = min(0.5, self.seconds / 4) if self.seconds > 0 else 0.0
        self.rank: int | None = None
        self._what = "starting"
        self._loop = None
        self._seq = 0
        self._board: np.ndarray | None = None
        self._slot = 0
        self._win = self._node = None
        self._abort = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ main thread

    def start(self, what: str) -> None:
        self.phase(what)
        if self.seconds > 0 and self._thread is None:
            faulthandler.dump_traceback_later(max(self.seconds, STARTUP_FLOOR_S), exit=True)
            self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
            self._thread.start()

    def phase(self, what: str, loop=None) -> None:
        """The main thread moved on to ``what`` (progress); ``loop``: an iterator whose
        steps count as progress too."""
        self._what, self._loop = what, loop
        self._seq += 1
        board = self._board
        if board is not None:  # at once: a rank stopped before the next tick is still exact
            board["phase"][self._slot] = what.encode()[:PHASE_BYTES]

    def counting(self, what: str, n: int):
        """``iter(range(n))`` watched as the phase ``what``: each step is progress."""
        it = iter(range(n))
        self.phase(what, it)
        return it

    def attach(self, comm, abort) -> None:
        """MPI is up: from now on a hang aborts the job with ``abort(code)``, and the ranks
        of ``comm`` on one machine share a heartbeat board. Collective over ``comm``."""
        from mpi4py import MPI

        self.rank, self._abort = comm.rank, abort
        if self.seconds <= 0:
            return
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        nbytes = BOARD.itemsize * node.size if node.rank == 0 else 0
        try:
            win = MPI.Win.Allocate_shared(nbytes, BOARD.itemsize, comm=node)
        except MPI.Exception:  # no shared windows here: each rank reports alone
            node.Free()
            faulthandler.cancel_dump_traceback_later()
            return
        buf, _ = win.Shared_query(0)
        board = np.ndarray((node.size,), dtype=BOARD, buffer=buf)
        now = time.monotonic()
        board[node.rank] = (comm.rank, os.getpid(), now, now, self._what.encode()[:PHASE_BYTES])
        node.Barrier()
        self._node, self._win, self._slot, self._board = node, win, node.rank, board
        faulthandler.cancel_dump_traceback_later()

    def set_rank(self, rank: int) -> None:
        """The rank to name this process by (the run's own numbering, once it is known)."""
        self.rank = rank

    def stop(self, guard_exit: bool = True) -> None:
        """Stop watching. ``guard_exit``: the process is about to end (MPI finalisation
        waits for every rank), so :mod:`faulthandler` guards that stretch as it does
        start-up."""
        faulthandler.cancel_dump_traceback_later()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._win is not None:
            self._board = None
            self._win.Free()
            self._node.Free()
            self._win = None
        if guard_exit and self.seconds > 0:
            faulthandler.dump_traceback_later(max(self.seconds, STARTUP_FLOOR_S), exit=True)

    # ------------------------------------------------------------ watcher thread

    def _watch(self) -> None:
        last_sig, last_progress, stuck_since = None, time.monotonic(), None
        while not self._stop.wait(self.tick):
            now = time.monotonic()
            loop = self._loop
            sig = (self._seq, operator.length_hint(loop) if loop is not None else None)
            if sig != last_sig:
                last_sig, last_progress = sig, now
            board = self._board
            if board is not None:
                i = self._slot
                board["rank"][i], board["alive"][i], board["progress"][i] = (
                    self.rank,
                    now,
                    last_progress,
                )
                board["phase"][i] = self._what.encode()[:PHASE_BYTES]
            if now - last_progress < self.seconds:
                stuck_since = None
                continue
            stuck_since = stuck_since or now
            # one reporter per machine; the others speak if it has not ended the job soon
            if board is None or self._is_reporter(board, now) or now - stuck_since > 2.0:
                self._report(board, now, now - last_progress)

    def stale_after(self) -> float:
        """A slot not stamped for this long belongs to a rank that stopped responding."""
        return max(4 * self.tick, 1.5)

    def _is_reporter(self, board: np.ndarray, now: float) -> bool:
        """Am I the lowest-numbered stuck rank on this machine that still responds?"""
        for slot, entry in enumerate(board):
            if (
                now - entry["alive"] < self.stale_after()
                and now - entry["progress"] >= self.seconds
            ):
                return slot == self._slot
        return True

    def _report(self, board: np.ndarray | None, now: float, idle: float) -> None:
        who = f"rank {self.rank}" if self.rank is not None else f"pid {os.getpid()}"
        if board is None:
            detail = (
                f"{who} waited {idle:.1f} s in: {self._what} "
                "(before the ranks shared heartbeats: a rank has not started or has stopped)"
            )
        else:
            detail = describe_board(board, now, self.stale_after())
        sys.stderr.write(
            f"{self.prefix}: watchdog: no progress for {self.seconds:g} s: {detail}; "
            "aborting the job\n"
        )
        sys.stderr.flush()
        if self._abort is not None:
            self._abort(3)
        os._exit(3)


def describe_board(board: np.ndarray, now: float, stale: float) -> str:
    """One line from the heartbeat board: who stopped responding, who waits, and in what."""
    stopped, waiting = [], {}
    for entry in board:
        rank, phase = int(entry["rank"]), entry["phase"].decode(errors="replace")
        if now - entry["alive"] >= stale:
            stopped.append(
                f"rank {rank} (pid {entry['pid']}) stopped responding "
                f"{now - entry['alive']:.1f} s ago, in: {phase}"
            )
        else:
            waiting.setdefault(phase, []).append((rank, now - entry["progress"]))
    parts = stopped or ["every rank on this machine still responds"]
    for phase, ranks in waiting.items():
        noun = "rank" if len(ranks) == 1 else "ranks"
        idle = max(t for _, t in ranks)
        parts.append(
            f"{noun} {format_ranks([r for r, _ in ranks])} in: {phase} "
            f"(no progress for {idle:.1f} s)"
        )
    return "; ".join(parts)


def format_ranks(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    out, ranks = [], sorted(ranks)
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(out)
