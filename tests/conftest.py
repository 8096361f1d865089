"""Suite-wide set-up."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def fast_core_compiled():
    """Compile (fresh checkout: 20-60 s) or load FAST's numba core once, before any test.

    Otherwise the first test that schedules pays the compile inside its own time limits
    (threaded ranks, mpiexec timeouts) and fails on a fresh machine only.
    """
    from commbench.kernels.fast import warmup

    warmup()
