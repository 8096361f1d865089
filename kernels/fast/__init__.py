"""FAST all-to-allv (Lei et al., NSDI '26): scheduler, per-rank plans, executors.

``schedule(traffic, gpus_per_node, **options) -> Schedule``, or ``Scheduler(gpus_per_node,
**options)`` called matrix after matrix (see :mod:`commbench.kernels.fast.scheduler`); the per-rank plan format is in :mod:`commbench.kernels.fast.plan`
and :mod:`commbench.kernels.fast.simulate` executes plans on numpy buffers for testing. Importing
this package is cheap: the numba core loads on the first :func:`schedule` or
:func:`warmup`.
"""

from commbench.kernels.fast.plan import RankPlan
from commbench.kernels.fast.scheduler import (
    DEFAULT_STRATEGY,
    OPTIONS,
    STRATEGIES,
    Schedule,
    Scheduler,
    Stage,
    check_traffic,
    compile_seconds,
    schedule,
    schedule_ahead,
    server_matrix,
    warmup,
)

__all__ = [
    "DEFAULT_STRATEGY",
    "OPTIONS",
    "STRATEGIES",
    "RankPlan",
    "Schedule",
    "Scheduler",
    "Stage",
    "check_traffic",
    "compile_seconds",
    "schedule",
    "schedule_ahead",
    "server_matrix",
    "warmup",
]
