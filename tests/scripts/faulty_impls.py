"""Run the commbench CLI with test-only all-reduce implementations.

``test-raise`` raises on rank 1 from 4 KiB on; ``test-hang`` never returns on rank 1;
``test-ordinal`` sleeps by how many calls it made since its setup and says, on rank 0,
how many calls each point made (which calls the timed loops time); ``test-late-end``'s
rank 1 ends each call 30 ms after the others, and with ``$COMMBENCH_TEST_EVENTS`` (a
folder) every rank writes there when each of its calls ended and when the harness
filled its buffers (what a rank does after a call it was done with early). They exist
only for the harness's tests and are registered here, not in kernels/.
``$COMMBENCH_TEST_STARTUP_FLOOR_S`` replaces the watchdog's start-up floor (10 s: how long
a rank may wait for the others to start), so a test of a stopped launch ends sooner.
"""

import os
import sys
import time

from commbench.kernels.registry import register


class _Base:
    def __init__(self, transport, params):
        self.transport = transport

    def setup(self, case):
        pass


@register("allreduce", "test-raise", backends=("cpu",))
class RaiseOnRankOne(_Base):
    def run(self, case):
        if self.transport.topo.rank == 1 and case.count * case.dtype.itemsize >= 4096:
            raise RuntimeError("injected failure on rank 1")
        self.transport.allreduce(case.send, case.recv, case.op)


@register("allreduce", "test-hang", backends=("cpu",))
class HangOnRankOne(_Base):
    def run(self, case):
        if self.transport.topo.rank == 1:
            time.sleep(3600)
        self.transport.allreduce(case.send, case.recv, case.op)


@register("allreduce", "test-ordinal", backends=("cpu",))
class SleepByOrdinal(_Base):
    """Its n-th call since ``setup`` sleeps (1 + n % 5) x 4 ms first."""

    calls: int | None = None

    def setup(self, case):
        self._say()
        self.calls = 0

    def run(self, case):
        time.sleep((1 + self.calls % 5) * 0.004)
        self.calls += 1
        self.transport.allreduce(case.send, case.recv, case.op)

    def close(self):
        self._say()

    def _say(self):
        if self.calls is not None and self.transport.topo.rank == 0:
            print(f"test-ordinal: {self.calls} calls", file=sys.stderr, flush=True)


EVENTS: list[tuple[str, float]] = []


@register("allreduce", "test-late-end", backends=("cpu",))
class LateEndOnRankOne(_Base):
    def run(self, case):
        self.transport.allreduce(case.send, case.recv, case.op)
        if self.transport.topo.rank == 1:
            time.sleep(0.03)
        EVENTS.append(("end", time.monotonic()))


def record_fills(folder: str) -> None:
    """Note when the harness fills buffers, and write this rank's events at exit."""
    import atexit
    import json

    from commbench.harness import collectives

    fill = collectives.fill

    def noted(*args, **kwargs):
        EVENTS.append(("fill", time.monotonic()))
        return fill(*args, **kwargs)

    collectives.fill = noted
    rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK", "0")

    def write() -> None:
        with open(f"{folder}/rank{rank}.json", "w") as fh:
            fh.write(json.dumps(EVENTS))

    atexit.register(write)


if __name__ == "__main__":
    from commbench.cli import main
    from commbench.harness import watchdog

    if os.environ.get("COMMBENCH_TEST_EVENTS"):
        record_fills(os.environ["COMMBENCH_TEST_EVENTS"])
    if os.environ.get("COMMBENCH_TEST_STARTUP_FLOOR_S"):
        watchdog.STARTUP_FLOOR_S = float(os.environ["COMMBENCH_TEST_STARTUP_FLOOR_S"])

    sys.exit(main(sys.argv[1:]))
