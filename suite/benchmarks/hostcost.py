"""What the Python-level implementations pay on the host per call and per message.

For each implementation, at a small size (where the host is most of the time): the
messages one call posts (recorded from the transport), its time in commbench's timed loop,
and the same messages posted from C (:func:`commbench.kernels.native.rounds_call`: each
group of posts up to a wait is one round, sends first). The difference is the host cost
of the Python implementation; the issue's budget is ~1.5 us per call plus ~0.3 us per
message. Library collectives an implementation calls inside (``transport.allreduce`` ...)
and one-sided transfers (NVRAR's CPU path) are not replayed: those rows say so, and their
"host cost" includes the library's time for them.

``python -m commbench.benchmarks.hostcost [NP [G]]`` starts itself on NP ranks, G per
emulated node (default 2 x 1: on a 2-core machine more ranks than cores make every round
wait for a descheduled peer, which measures the scheduler, not the host cost), or runs under
the launcher that started it (``make bench``).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from commbench.kernels.transport import slices

NP, GPUS_PER_NODE = 2, 1
IMPLS = {
    "alltoallv": ("fanout", "spreadout", "pxn", "deepep", "balance-only", "fast", "fast+sched"),
    "allreduce": ("ring", "recursive-doubling", "rabenseifner", "nvrar"),
}
SIZE = {"alltoallv": 4096, "allreduce": 1024}  # bytes per rank
ITERS, WARMUP, ROUNDS = 200, 20, 3
PER_CALL_US, PER_MESSAGE_US = 1.5, 0.3
LIBRARY_CALLS = ("allreduce", "reduce_scatter", "allgather", "alltoallv")


class Recorder:
    """Wraps a transport's ``start``, ``start_ranges``, ``plan`` and library collectives to
    see what one call posts (install it before the implementation's ``setup`` binds its
    plans)."""

    def __init__(self, transport) -> None:
        self.t = transport
        self.rounds: list[list] = []
        self.library_calls = 0
        self.on = False
        self._waited = True
        self._start, self._plan = transport.start, transport.plan
        self._start_ranges = transport.start_ranges
        transport.start, transport.plan = self.start, self.plan
        transport.start_ranges = self.start_ranges
        for name in LIBRARY_CALLS:
            setattr(transport, name, self._counting(getattr(transport, name)))

    def remove(self) -> None:
        """The transport's own methods back (what is timed must not pay for the recorder)."""
        for name in ("start", "plan", "start_ranges", *LIBRARY_CALLS):
            delattr(self.t, name)

    def _counting(self, method):
        def call(*args, **kwargs):
            self.library_calls += self.on
            return method(*args, **kwargs)

        return call

    def plan(self, sends, recvs, group: str = "world"):
        bound, recorder = self._plan(sends, recvs, group), self

        class Recorded:
            def start(self):
                recorder.posting(sends, recvs, group)
                return recorder.waited(bound.start())

            def run(self) -> None:
                self.start().wait()

        return Recorded()

    def start(self, sends, recvs, group: str = "world"):
        self.posting(sends, recvs, group)
        return self.waited(self._start(sends, recvs, group))

    def start_ranges(self, bufs, sends, recvs, group: str = "world"):
        self.posting(slices(bufs, sends), slices(bufs, recvs), group)
        return self.waited(self._start_ranges(bufs, sends, recvs, group))

    def posting(self, sends, recvs, group: str) -> None:
        if not self.on:
            return
        if self._waited:  # posts after a wait begin a new round
            self.rounds.append([])
            self._waited = False
        comm = self.t.topo.group(group)
        self.rounds[-1] += [(True, p, b.nbytes, comm) for p, b in sends]
        self.rounds[-1] += [(False, p, b.nbytes, comm) for p, b in recvs]

    def waited(self, pending):
        recorder = self

        class Waited:
            def wait(self) -> None:
                recorder._waited = True
                pending.wait()

        return Waited()

    def replay_rounds(self) -> tuple[list, int, int]:
        """The rounds with byte offsets into two scratch buffers, and their sizes."""
        rounds, send_size, recv_size = [], 0, 0
        for messages in self.rounds:
            offsets = {True: 0, False: 0}
            placed = []
            for is_send, peer, nbytes, comm in messages:
                placed.append((is_send, peer, nbytes, offsets[is_send], comm))
                offsets[is_send] += nbytes
            rounds.append(placed)
            send_size, recv_size = max(send_size, offsets[True]), max(recv_size, offsets[False])
        return rounds, send_size, recv_size


def measure(collective: str, impl: str, gpus_per_node: int) -> dict:
    """This rank's numbers for one implementation (collective over the world)."""
    from commbench.harness.driver import Sweep, add_arguments, make_config
    from commbench.kernels import native

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    size = str(SIZE[collective])
    args = parser.parse_args(
        [collective, "--impl", impl, "--gpus-per-node", str(gpus_per_node), "-b", size,
         "-e", size, "-n", str(ITERS), "-w", str(WARMUP), "-c", "0"]
    )  # fmt: skip
    sweep = Sweep(make_config(args))
    workload = sweep.cfg.workloads[0]
    point = sweep._build(workload, SIZE[collective])
    recorder = Recorder(sweep.transport)
    sweep.impl.setup(point.case)
    sweep.impl.run(point.case)  # compiled code ready
    recorder.on = True
    sweep.impl.run(point.case)
    recorder.remove()
    rounds, send_size, recv_size = recorder.replay_rounds()
    messages = sum(len(r) for r in rounds)
    send, recv = np.zeros(max(send_size, 1), np.uint8), np.zeros(max(recv_size, 1), np.uint8)
    comm = sweep.topo.world
    replay = native.rounds_call(rounds, send, recv, comm)
    python_us, c_us = [], []
    for _ in range(ROUNDS):  # interleaved
        python_us.append(sweep._measure(0, workload, SIZE[collective])["time_us"])
        c_us.append(native.time_call(replay, ITERS, "pipelined", warmup=WARMUP).per_call_us)
    sweep.transport.close()
    return {
        "python_us": float(np.median(python_us)),
        "c_us": float(np.median(c_us)),
        "messages": messages,
        "rounds": len(rounds),
        "library_calls": recorder.library_calls,
    }


def main(argv: list[str]) -> int:
    from commbench.launch import relaunch, under_launcher

    if not under_launcher():
        ranks = int(argv[0]) if argv else NP
        return relaunch(ranks, "commbench.benchmarks.hostcost", argv[1:2], timeout=900)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    gpus_per_node = int(argv[0]) if argv else GPUS_PER_NODE
    rows = []
    for collective, impls in IMPLS.items():
        for impl in impls:
            mine = measure(collective, impl, gpus_per_node)
            every = comm.gather(mine)
            if comm.rank == 0:
                rows.append((collective, impl, every))
    if comm.rank == 0:
        print(
            f"# host cost per call: {comm.size} ranks ({comm.size // gpus_per_node} nodes x "
            f"{gpus_per_node}), "
            f"cpu backend, pipelined, -n {ITERS}, median of {ROUNDS} interleaved rounds; "
            "per rank, the busiest shown"
        )
        print(
            f"# budget = {PER_CALL_US} us + {PER_MESSAGE_US} us x messages above the same "
            "messages posted from C"
        )
        print(
            f"  {'collective':10s} {'impl':18s} {'size(B)':>8s} {'msgs':>5s} {'rounds':>6s} "
            f"{'python(us)':>10s} {'C(us)':>8s} {'host(us)':>8s} {'/msg':>6s} {'budget':>7s}"
        )
        for collective, impl, every in rows:
            worst = max(every, key=lambda m: m["python_us"] - m["c_us"])
            host = worst["python_us"] - worst["c_us"]
            msgs = max(m["messages"] for m in every)
            budget = PER_CALL_US + PER_MESSAGE_US * msgs
            per_msg = f"{host / msgs:6.2f}" if msgs else f"{'-':>6s}"
            note = "" if host <= budget else "  over"
            if worst["library_calls"] or not msgs:
                note += "  (C replays p2p only: library calls / one-sided transfers not replayed)"
            print(
                f"  {collective:10s} {impl:18s} {SIZE[collective]:8d} {msgs:5d} "
                f"{worst['rounds']:6d} {worst['python_us']:10.2f} {worst['c_us']:8.2f} "
                f"{host:8.2f} {per_msg} {budget:7.2f}{note}"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
