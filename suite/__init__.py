"""commbench: benchmarks for GPU collective communication (FAST all-to-allv, NVRAR
all-reduce, MPI/NCCL/RCCL baselines).

The command line is :mod:`commbench.cli`; the parts are subpackages (``harness``, ``jobs``,
``cluster``, ``model``, ``sweep``, ``report``, ``gpucheck``, ``benchmarks``) over
:mod:`commbench.analysis` and :mod:`commbench.kernels`. Nothing is imported here, so
``import commbench.kernels`` costs only what it needs.
"""

__version__ = "0.1.0"
