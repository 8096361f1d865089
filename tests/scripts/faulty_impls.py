"""Run the commbench CLI with two deliberately broken all-reduce implementations.

``test-raise`` raises on rank 1 from 4 KiB on; ``test-hang`` never returns on rank 1.
They exist only for the failure-handling tests and are registered here, not in kernels/.
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


if __name__ == "__main__":
    from commbench.cli import main
    from commbench.harness import watchdog

    if os.environ.get("COMMBENCH_TEST_STARTUP_FLOOR_S"):
        watchdog.STARTUP_FLOOR_S = float(os.environ["COMMBENCH_TEST_STARTUP_FLOOR_S"])

    sys.exit(main(sys.argv[1:]))
